"""QNN's log callback: formats the C varargs message and hands (level, text) to a Python sink."""
from __future__ import annotations

import ctypes as C
from typing import Callable

from qnnrt._capi.functions import LOG_CALLBACK

_libc = C.CDLL(None)
_vsnprintf = _libc.vsnprintf
_vsnprintf.argtypes = [C.c_char_p, C.c_size_t, C.c_char_p, C.c_void_p]
_vsnprintf.restype = C.c_int


def make_log_callback(sink: Callable[[int, str], None]):
    """A C callback for logCreate. Keep the returned object alive as long as the log handle."""
    @LOG_CALLBACK
    def callback(fmt, level, timestamp, va_list):  # pragma: no cover - called from C
        try:
            buf = C.create_string_buffer(4096)  # per call: callbacks come from many threads
            _vsnprintf(buf, len(buf), fmt, va_list)
            sink(int(level), buf.value.decode(errors="replace").strip())
        except Exception:
            pass  # an exception must never propagate into QNN

    return callback
