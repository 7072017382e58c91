"""QNN's log callback: formats the C varargs message and hands (level, text) to a Python sink."""
from __future__ import annotations

from typing import Callable

from qnnrt._capi.functions import LOG_CALLBACK
from qnnrt._capi.libc import format_varargs


def make_log_callback(sink: Callable[[int, str], None]):
    """A C callback for logCreate. Keep the returned object alive as long as the log handle."""
    @LOG_CALLBACK
    def callback(fmt, level, timestamp, va_list):  # pragma: no cover - called from C
        try:
            sink(int(level), format_varargs(fmt, va_list).strip())
        except Exception:  # noqa: BLE001 - an exception must never propagate into QNN
            pass

    return callback
