"""qnnrt: run Qualcomm QNN HTP context binaries and programs of many of them from Python."""
import logging as _logging

from qnnrt.errors import (BuildError, FormatError, InputError, LibraryNotFoundError, QnnError,
                          QnnrtError)

__version__ = "0.1.0"

_logging.getLogger("qnnrt").addHandler(_logging.NullHandler())


def load(path, residency="auto", soc=None, **options):
    """Open a program folder, EPContext .onnx, context binary .bin or ExecuTorch .pte.

    Returns a `Program`: `prog.methods`, `prog.run(method, inputs)`, `prog.close()`.
    """
    from qnnrt.runtime.program import load as _load
    return _load(path, residency=residency, soc=soc, **options)


__all__ = ["load", "QnnrtError", "QnnError", "FormatError", "InputError", "BuildError",
           "LibraryNotFoundError", "__version__"]
