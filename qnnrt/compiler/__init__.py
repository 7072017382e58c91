"""qnnrt build: partition ONNX models into HTP partitions + CPU ops, compile the partitions with ONNX
Runtime's QNN EP into context binaries, and write programs (docs/program-format.md). Also the
Llama-shaped demo models (``qnnrt.compiler.demo``).

Modules: ``partition`` (placement and partitioning), ``compile`` (QNN EP compilation, cache),
``program_writer`` (method EPContext models), ``builder`` (the whole build), ``demo``. The
``qnnrt build`` command itself is ``qnnrt.cli.build``.
"""
from qnnrt.compiler.builder import BuildOptions, BuildReport, build_demo, build_program

__all__ = ["BuildOptions", "BuildReport", "build_program", "build_demo"]
