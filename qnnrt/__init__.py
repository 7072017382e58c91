"""qnnrt: run Qualcomm QNN HTP context binaries and programs of many of them from Python.

    with qnnrt.load("program_dir") as prog:        # folder, EPContext .onnx, .bin or .pte
        out = prog.run("forward", {"x": x})         # numpy in, numpy out
"""
import logging as _logging

from qnnrt.errors import (BuildError, FormatError, InputError, KernelError, LibraryNotFoundError, QnnError,
                          QnnrtError)
from qnnrt.loader import LoadOptions, load
from qnnrt.runtime.method import IOSpec, Method
from qnnrt.runtime.program import Program
from qnnrt.runtime.residency import Residency

__version__ = "0.1.0"

_logging.getLogger("qnnrt").addHandler(_logging.NullHandler())

__all__ = ["load", "LoadOptions", "Program", "Method", "IOSpec", "Residency", "QnnrtError", "QnnError",
           "FormatError", "InputError", "BuildError", "KernelError", "LibraryNotFoundError", "__version__"]
