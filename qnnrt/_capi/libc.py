"""The platform's C runtime, for what QNN's ABI needs from it: vsnprintf to format the varargs of
QNN's log callback, and malloc statistics for the host heap profile. Chosen at import without failing
on any OS.

QNN calls `void cb(const char* fmt, QnnLog_Level_t level, uint64_t timestamp, va_list args)`. The
va_list reaches ctypes as one pointer-sized value on every ABI qnnrt runs on (x86_64 SysV: the array
type decays to a pointer; AAPCS64: the 32-byte struct is passed by reference; Windows x64/ARM64: a
char*) and is handed on unchanged to the C runtime's vsnprintf, which consumes it: one call only.

The vsnprintf, in order: glibc / bionic / musl (already in the process: dlopen(NULL), else libc.so.6,
else libc.so); on Windows the UCRT (ucrtbase.dll exports no vsnprintf: it is an inline over
__stdio_common_vsprintf, called with the standard-snprintf option), then msvcrt's _vsnprintf. With
none, messages are passed on unformatted rather than failing. dlopen(NULL) is never tried on Windows.
"""
from __future__ import annotations

import ctypes as C
import os
from typing import Any, Callable

BUFFER_SIZE = 8192
_UCRT_STANDARD_SNPRINTF_BEHAVIOR = 1 << 1   # corecrt_stdio_config.h: what snprintf/vsnprintf pass
_VSNPRINTF_ARGS = [C.c_char_p, C.c_size_t, C.c_char_p, C.c_void_p]


def _posix_names() -> list[tuple[str, str | None]]:
    return [("C library of this process", None), ("libc.so.6", "libc.so.6"),  # glibc
            ("libc.so", "libc.so")]                                            # bionic, musl


def _open_c_runtime(os_name: str | None = None, load: Callable[[Any], Any] | None = None) -> Any:
    """This process's C runtime library (for mallinfo), or None."""
    os_name = os.name if os_name is None else os_name
    load = C.CDLL if load is None else load
    names = ["ucrtbase", "msvcrt"] if os_name == "nt" else [n for _, n in _posix_names()]
    for name in names:
        try:
            return load(name)
        except OSError:
            continue
    return None


LIBC = _open_c_runtime()


class Formatter:
    """`format(fmt, va_list, size) -> str` with one C runtime's vsnprintf."""

    def __init__(self, name: str, call: Callable[..., int], legacy: bool = False):
        self.name = name
        self._call = call
        self._legacy = legacy  # msvcrt _vsnprintf: no NUL on truncation, -1 when it does not fit

    def format(self, fmt: bytes, va_list: Any, size: int = BUFFER_SIZE) -> str:
        buf = C.create_string_buffer(size)  # per call: QNN logs from many threads
        n = self._call(buf, size - 1 if self._legacy else size, fmt, va_list)
        text = buf.value.decode(errors="replace")
        if n < 0 or n >= size:
            text += " [truncated]"
        return text


def choose_formatter(os_name: str | None = None, load: Callable[[Any], Any] | None = None
                     ) -> Formatter | None:
    """The first usable vsnprintf for this OS (`os.name`: 'posix' / 'nt'); `load(name)` opens a
    library (ctypes.CDLL by default; tests pass fakes). Never raises."""
    os_name = os.name if os_name is None else os_name
    load = C.CDLL if load is None else load
    if os_name == "nt":
        try:
            fn = load("ucrtbase").__stdio_common_vsprintf  # noqa: SLF001 - a C symbol, not a Python private
            fn.argtypes = [C.c_uint64, C.c_char_p, C.c_size_t, C.c_char_p, C.c_void_p, C.c_void_p]
            fn.restype = C.c_int
            return Formatter("ucrtbase.dll __stdio_common_vsprintf",
                             lambda b, n, f, v: fn(_UCRT_STANDARD_SNPRINTF_BEHAVIOR, b, n, f, None, v))
        except (OSError, AttributeError, TypeError):
            pass
        try:
            fn = load("msvcrt")._vsnprintf  # noqa: SLF001 - a C symbol
            fn.argtypes, fn.restype = _VSNPRINTF_ARGS, C.c_int
            return Formatter("msvcrt.dll _vsnprintf", fn, legacy=True)
        except (OSError, AttributeError, TypeError):
            return None
    for what, name in _posix_names():
        try:
            fn = load(name).vsnprintf
        except (OSError, AttributeError, TypeError):
            continue
        fn.argtypes, fn.restype = _VSNPRINTF_ARGS, C.c_int
        return Formatter(f"{what} vsnprintf", fn)
    return None


FORMATTER = choose_formatter()


def format_varargs(fmt: bytes | None, va_list: Any, size: int = BUFFER_SIZE) -> str:
    """A C printf format and its va_list -> text (the raw format where no vsnprintf exists)."""
    if not fmt:
        return ""
    if FORMATTER is None:
        return fmt.decode(errors="replace")
    return FORMATTER.format(fmt, va_list, size)


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


def set_parent_death_signal(sig: int) -> bool:
    """Linux prctl(PR_SET_PDEATHSIG, sig): the kernel sends `sig` to this process when its parent
    exits. False where it does not exist (other OSes) or fails."""
    import sys
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = C.CDLL(None, use_errno=True)
        return libc.prctl(1, int(sig), 0, 0, 0) == 0   # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return False
