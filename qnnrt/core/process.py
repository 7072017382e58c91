"""A helper process's tie to its parent: it must never outlive the process that started it."""
from __future__ import annotations

import os
import signal

from qnnrt._capi.libc import set_parent_death_signal


def die_with_parent(parent: int) -> None:
    """Linux: the kernel kills this process when its parent exits, however it exits. Everywhere:
    exit now if the parent is already gone (it died before this took effect)."""
    set_parent_death_signal(getattr(signal, "SIGKILL", 9))
    if parent and os.getppid() != parent:
        os._exit(1)
