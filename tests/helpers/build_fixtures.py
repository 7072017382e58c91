"""Session fixtures that build demo programs with the real builder (imported by conftest.py).

Compiles go through the compile cache (the session's, tests/conftest.py), so a warm run of a
fixture takes about a second; a cold `tiny` build about 6 s, `pd` about 40 s.
"""
from __future__ import annotations

import pytest

__all__ = ["built_tiny_program", "built_tiny_two_method_program", "built_tiny_grouped_program",
           "built_pd_program", "build_demo_program"]


def build_demo_program(out, preset: str, two_method: bool = False, graphs_per_context: int = 1):
    """Build demo ``preset`` into ``out`` (cpu-ops MatMul, fp16, SM8550); returns the BuildReport."""
    from qnnrt.compiler.builder import BuildOptions, build_demo
    from qnnrt.compiler import demo
    cfg = demo.demo_config(preset)
    options = BuildOptions(cpu_ops=cfg.cpu_ops, graphs_per_context=graphs_per_context, progress=False)
    return build_demo(preset, out, two_method=two_method, options=options)


@pytest.fixture(scope="session")
def built_tiny_program(tmp_path_factory):
    """The `tiny` demo, --cpu-ops MatMul: 66 partitions -> 66 binaries; method `forward`.
    Returns the BuildReport (`.out` is the folder, `.manifest` the ProgramManifest; the float32
    source model is at out/reference/forward.onnx)."""
    return build_demo_program(tmp_path_factory.mktemp("tiny") / "prog", "tiny")


@pytest.fixture(scope="session")
def built_tiny_two_method_program(tmp_path_factory):
    """`tiny` with methods prefill (S=16) and decode (S=1): 66 binaries, 2 graphs each."""
    return build_demo_program(tmp_path_factory.mktemp("tiny2") / "prog", "tiny", two_method=True)


@pytest.fixture(scope="session")
def built_tiny_grouped_program(tmp_path_factory):
    """`tiny` two-method with --graphs-per-context 4: 17 binaries (16 x 8 graphs + 1 x 4)."""
    return build_demo_program(tmp_path_factory.mktemp("tinyg") / "prog", "tiny", two_method=True,
                              graphs_per_context=4)


@pytest.fixture(scope="session")
def built_pd_program(tmp_path_factory):
    """The `pd` demo: 402 partitions -> 402 binaries of ~10 MB PD estimate each; creating them all
    up front exhausts the simulator's ~3.64 GB PD budget (fails at about the 347th), each alone loads."""
    return build_demo_program(tmp_path_factory.mktemp("pd") / "prog", "pd")
