"""The platform's C runtime, for what QNN's ABI needs from it: vsnprintf to format the varargs of
QNN's log callback, and malloc statistics for the host heap profile. Chosen at import without failing
on any OS: glibc / bionic / musl through the process's own symbols, the Windows UCRT by name."""
from __future__ import annotations

import ctypes as C
import sys
from typing import Any, Callable


def _open_c_runtime() -> Any:
    names = ["ucrtbase", "msvcrt"] if sys.platform == "win32" else [None, "libc.so.6", "libc.so"]
    for name in names:
        try:
            return C.CDLL(name)
        except OSError:
            continue
    return None


LIBC = _open_c_runtime()


def _vsnprintf() -> Any:
    fn = getattr(LIBC, "vsnprintf", None) if LIBC is not None else None
    if fn is None:
        return None
    fn.argtypes = [C.c_char_p, C.c_size_t, C.c_char_p, C.c_void_p]
    fn.restype = C.c_int
    return fn


VSNPRINTF = _vsnprintf()


def format_varargs(fmt: bytes | None, va_list: Any, size: int = 4096) -> str:
    """A C printf format and its va_list -> text (the raw format where no vsnprintf exists)."""
    if not fmt:
        return ""
    if VSNPRINTF is None:
        return fmt.decode(errors="replace")
    buf = C.create_string_buffer(size)  # per call: QNN logs from many threads
    VSNPRINTF(buf, size, fmt, va_list)
    return buf.value.decode(errors="replace")


_MALLINFO_FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()


class MallInfo2(C.Structure):
    _fields_ = [(n, C.c_size_t) for n in _MALLINFO_FIELDS]


class MallInfo(C.Structure):
    _fields_ = [(n, C.c_int) for n in _MALLINFO_FIELDS]


def mallinfo_reader(libc: Any = None) -> tuple[Callable[[], Any] | None, bool, str]:
    """(function returning a mallinfo struct, whether its counters are 32-bit, a note) of `libc`
    (default: this process's C runtime); (None, False, why) where the C library has neither."""
    libc = LIBC if libc is None else libc
    fn = getattr(libc, "mallinfo2", None) if libc is not None else None
    if fn is not None:
        fn.restype = MallInfo2
        return fn, False, "heap_in_use from glibc mallinfo2() (uordblks + hblkhd)"
    fn = getattr(libc, "mallinfo", None) if libc is not None else None
    if fn is not None:
        fn.restype = MallInfo
        return fn, True, "heap_in_use from mallinfo() (glibc < 2.33: 32-bit counters wrap at 4 GiB)"
    return None, False, "no mallinfo2/mallinfo in this C library (not glibc): heap_in_use unavailable"
