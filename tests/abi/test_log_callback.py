"""The QNN log callback formats varargs messages with the C runtime's vsnprintf.

A tiny C library (tests/data/fake_qnn_log.c), compiled here with the system cc, registers qnnrt's callback
and calls it as QNN does: void(const char* fmt, QnnLog_Level_t level, uint64_t timestamp, va_list).
The choice of vsnprintf per C runtime is tested with fake loaders (Windows is not here)."""
from __future__ import annotations

import ctypes as C
import shutil
from pathlib import Path

import pytest

from qnnrt._capi import libc, log
from tests.helpers import logcb_check


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory) -> Path:
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler")
    return logcb_check.compile_library(tmp_path_factory.mktemp("logcb") / "libfake_qnn_log.so")


def test_formatter_chosen_here():
    assert libc.FORMATTER is not None
    assert libc.FORMATTER.name == "C library of this process vsnprintf"


@pytest.mark.parametrize("case", range(len(logcb_check.EXPECTED)))
def test_varargs_formatted(fake_lib, case):
    lvl, text, glvl, gtext = logcb_check.run(fake_lib)[case]
    assert (glvl, gtext) == (lvl, text)


def test_callback_survives_a_raising_sink(fake_lib):
    lib = C.CDLL(str(fake_lib))
    def sink(level, text):
        raise RuntimeError("sink bug")
    cb = log.make_log_callback(sink)
    lib.fake_register.argtypes = [C.c_void_p]
    lib.fake_register(C.cast(cb, C.c_void_p))
    assert lib.fake_emit(0) == 0   # the exception stayed in Python
    lib.fake_register(None)


# ---- choosing the vsnprintf per OS, without that OS ----------------------------------------

class _Lib:
    def __init__(self, **fns):
        self.__dict__.update(fns)


class _Fn:
    """Stands for a ctypes function: accepts argtypes/restype, records calls, writes `reply`."""
    def __init__(self, reply: bytes = b"formatted", ret: int | None = None):
        self.calls, self.reply, self.ret = [], reply, ret

    def __call__(self, *args):
        self.calls.append(args)
        buf = next(a for a in args if isinstance(a, C.Array))
        C.memmove(buf, self.reply + b"\0", len(self.reply) + 1)
        return len(self.reply) if self.ret is None else self.ret


def _loader(libs: dict):
    def load(name):
        if name not in libs:
            raise OSError(f"cannot load {name}")
        return libs[name]
    return load


def test_windows_prefers_ucrt_with_standard_snprintf_option():
    fn = _Fn()
    f = libc.choose_formatter("nt", _loader({"ucrtbase": _Lib(__stdio_common_vsprintf=fn),
                                            "msvcrt": _Lib(_vsnprintf=_Fn())}))
    assert f.name.startswith("ucrtbase")
    assert f.format(b"%d", 1234) == "formatted"
    options, buf, size, fmt, locale, va = fn.calls[0]
    assert options == 2 and size == libc.BUFFER_SIZE and fmt == b"%d" and locale is None and va == 1234


def test_windows_falls_back_to_msvcrt_and_marks_truncation():
    fn = _Fn(ret=-1)   # _vsnprintf: -1 when the message does not fit
    f = libc.choose_formatter("nt", _loader({"msvcrt": _Lib(_vsnprintf=fn)}))
    assert f.name.startswith("msvcrt")
    assert f.format(b"%s", 1) == "formatted [truncated]"
    assert fn.calls[0][1] == libc.BUFFER_SIZE - 1   # room for the NUL it does not write


def test_windows_with_no_c_runtime_is_none_not_an_error():
    assert libc.choose_formatter("nt", _loader({})) is None


def test_windows_never_calls_dlopen_null():
    seen = []
    def load(name):
        seen.append(name)
        raise OSError
    libc.choose_formatter("nt", load)
    assert None not in seen and seen == ["ucrtbase", "msvcrt"]


def test_posix_order_process_then_glibc_then_bionic():
    seen = []
    def load(name):
        seen.append(name)
        if name == "libc.so":
            return _Lib(vsnprintf=_Fn())
        raise OSError
    f = libc.choose_formatter("posix", load)
    assert seen == [None, "libc.so.6", "libc.so"] and f.name == "libc.so vsnprintf"


def test_posix_without_vsnprintf_is_none():
    assert libc.choose_formatter("posix", lambda name: _Lib()) is None


def test_passthrough_when_no_formatter(monkeypatch):
    monkeypatch.setattr(libc, "FORMATTER", None)
    assert libc.format_varargs(b"size %zu", None) == "size %zu"


def test_truncation_is_marked():
    """vsnprintf returns the length it wanted: a message longer than the buffer says it was cut."""
    f = libc.Formatter("fake", _Fn(reply=b"a", ret=5))
    assert f.format(b"%s", 1, size=2) == "a [truncated]"


def test_c_runtime_for_mallinfo_per_os():
    assert libc._open_c_runtime("nt", _loader({"msvcrt": "m"})) == "m"
    seen = []
    def load(name):
        seen.append(name)
        raise OSError
    assert libc._open_c_runtime("posix", load) is None and seen == [None, "libc.so.6", "libc.so"]
