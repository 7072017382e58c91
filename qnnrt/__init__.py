"""qnnrt: run Qualcomm QNN HTP context binaries and programs of many of them from Python.

    with qnnrt.load("program_dir") as prog:        # folder, EPContext .onnx, .bin or .pte
        out = prog.run("forward", {"x": x})         # numpy in, numpy out
"""
import logging as _logging
from typing import TYPE_CHECKING

from qnnrt.errors import (BuildError, FormatError, InputError, KernelError, LibraryNotFoundError, QnnError,
                          QnnrtError, RecoveryError)

if TYPE_CHECKING:
    from qnnrt.loader import LoadOptions, load
    from qnnrt.runtime.method import Method
    from qnnrt.runtime.method_spec import IOSpec
    from qnnrt.runtime.program import Program
    from qnnrt.runtime.residency import Residency

# imported on first use (PEP 562), so `qnnrt ...` on the command line starts its worker process
# without loading numpy and the QNN bindings in the parent, which only waits
_LAZY = {"load": "qnnrt.loader", "LoadOptions": "qnnrt.loader", "IOSpec": "qnnrt.runtime.method_spec",
         "Method": "qnnrt.runtime.method", "Program": "qnnrt.runtime.program",
         "Residency": "qnnrt.runtime.residency"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'qnnrt' has no attribute {name!r}")

__version__ = "0.1.0"

_logging.getLogger("qnnrt").addHandler(_logging.NullHandler())

__all__ = ["load", "LoadOptions", "Program", "Method", "IOSpec", "Residency", "QnnrtError", "QnnError",
           "FormatError", "InputError", "BuildError", "KernelError", "LibraryNotFoundError", "RecoveryError",
           "__version__"]
