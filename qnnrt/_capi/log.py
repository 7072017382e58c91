"""QNN's log callback: formats the C varargs message and hands (level, text) to a Python sink.

The callback runs inside a QNN call (C frames above and below it). An exception raised in it cannot
propagate: ctypes would print "Exception ignored on calling ctypes callback" and drop it, so a Ctrl-C
landing there would be lost. The callback therefore keeps a KeyboardInterrupt / SystemExit it catches
as *pending*, and `raise_pending()` re-raises it once the QNN call has returned (Backend.check calls it
after every QNN call). Signal handlers can ask `in_callback(frame)` to defer instead of raising."""
from __future__ import annotations

import threading
from types import FrameType
from typing import Any, Callable

from qnnrt._capi.functions import LOG_CALLBACK
from qnnrt._capi.libc import format_varargs

class Deferred:
    """The interrupt the log callback caught and could not raise (None: none). One instance,
    `DEFERRED`: a graph call reads `DEFERRED.exc` after it returns (one attribute read, no call)."""
    __slots__ = ("exc",)

    def __init__(self) -> None:
        self.exc: BaseException | None = None


DEFERRED = Deferred()
_pending_lock = threading.Lock()


def defer(exc: BaseException) -> None:
    """Keep `exc` (the first one wins) to be raised by the next `raise_pending()`."""
    with _pending_lock:
        if DEFERRED.exc is None:
            DEFERRED.exc = exc


def interrupt_pending() -> bool:
    """Did the log callback defer an interrupt?"""
    return DEFERRED.exc is not None


def raise_pending() -> None:
    """Raise the interrupt the log callback deferred, if any (then it is cleared)."""
    if DEFERRED.exc is None:
        return
    with _pending_lock:
        exc, DEFERRED.exc = DEFERRED.exc, None
    if exc is not None:
        raise exc


def has_pending() -> bool:
    return DEFERRED.exc is not None


def _callback_body(sink: Callable[[int, str], None], fmt: bytes | None, level: int,
                   va_list: int | None) -> None:
    try:
        sink(int(level), format_varargs(fmt, va_list).strip())
    except Exception:  # noqa: BLE001 - an exception must never propagate into QNN
        pass
    except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt, SystemExit: raised after the QNN call returns
        defer(e)


_CALLBACK_CODES = {_callback_body.__code__}


def in_callback(frame: FrameType | None) -> bool:
    """True if `frame` (e.g. the one a signal handler interrupted) runs inside the QNN log callback."""
    while frame is not None:
        if frame.f_code in _CALLBACK_CODES:
            return True
        frame = frame.f_back
    return False


def make_log_callback(sink: Callable[[int, str], None]) -> Any:
    """A C callback for logCreate (a LOG_CALLBACK instance). Keep the returned object alive as long
    as the log handle."""
    def callback(fmt: bytes | None, level: int, timestamp: int,
                 va_list: int | None) -> None:  # pragma: no cover - called from C
        try:
            _callback_body(sink, fmt, level, va_list)
        except BaseException as e:  # noqa: BLE001 - raised between frames: keep it for later
            defer(e)

    _CALLBACK_CODES.add(callback.__code__)  # one code object for every closure
    return LOG_CALLBACK(callback)
