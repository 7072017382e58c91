"""qnnrt: run Qualcomm QNN HTP context binaries and programs of many of them from Python."""
from qnnrt.errors import (BuildError, FormatError, InputError, LibraryNotFoundError, QnnError,
                          QnnrtError)

__version__ = "0.1.0"

__all__ = ["QnnrtError", "QnnError", "FormatError", "InputError", "BuildError",
           "LibraryNotFoundError", "__version__"]

import logging as _logging

_logging.getLogger("qnnrt").addHandler(_logging.NullHandler())
