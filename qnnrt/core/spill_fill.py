"""SpillFillGroup: contexts registered as one spill-fill group (HTP context config option 2,
REGISTER_MULTI_CONTEXTS), so the HTP allocates one spill-fill buffer for the group instead of one
per context.

The first context created with the group's config names no group (firstGroupHandle NULL) and
becomes its head; every later one names the head, as ExecuTorch's runtime does on devices
(HtpContextCustomConfig.cpp, target build). The buffer size is fixed by the head's registration.
If the head is freed (residency evicts it), the next context created starts a new group.
A backend that refuses the option (the x86 simulator: QNN error 5010) gets a plain context and the
group records why, once; it is not asked again. Context (core/context.py) calls `config`, `joined`,
`refuse` and `left`; nothing else here touches QNN.
"""
from __future__ import annotations

import ctypes as C
import threading
from typing import TYPE_CHECKING

from qnnrt._capi import types as T

if TYPE_CHECKING:
    from qnnrt.core.context import Context

CONFIG_NOT_SUPPORTED = 5010   # QNN's answer on the simulator ("HTP Config option: 2 not supported")


class SpillFillGroup:
    """One spill-fill group of `max_spill_fill_bytes` (the largest spill-fill buffer of its graphs,
    or the .pte's max_sf_buf_size)."""

    def __init__(self, max_spill_fill_bytes: int):
        if max_spill_fill_bytes <= 0:
            raise ValueError("a spill-fill group needs a buffer size > 0")
        self.max_spill_fill_bytes = int(max_spill_fill_bytes)
        self.head: Context | None = None
        self.members: list[str] = []      # context names in registration order (the head first)
        self.groups_formed = 0
        self.refused = ""                 # why the backend would not register the group
        self._lock = threading.Lock()

    @property
    def usable(self) -> bool:
        return not self.refused

    def config(self) -> tuple[T.ContextConfig, list]:
        """The context config for the next creation, and the objects to keep alive during it."""
        htp = T.HtpContextCustomConfig(option=T.HTP_CONTEXT_OPTION_REGISTER_MULTI_CONTEXTS)
        with self._lock:
            head = self.head
        htp.groupRegistration.firstGroupHandle = head.handle.value if head is not None else None
        htp.groupRegistration.maxSpillFillBuffer = self.max_spill_fill_bytes
        wrap = T.ContextConfig(option=T.CONTEXT_CONFIG_OPTION_CUSTOM)
        wrap.customConfig = C.addressof(htp)
        return wrap, [htp, wrap]

    def joined(self, ctx: Context) -> None:
        with self._lock:
            if self.head is None:
                self.head = ctx
                self.groups_formed += 1
            self.members.append(ctx.name)

    def left(self, ctx: Context) -> None:
        """A member was freed; the head leaving ends the group (the next creation starts one)."""
        with self._lock:
            if self.head is ctx:
                self.head = None

    def refuse(self, why: str) -> None:
        with self._lock:
            self.refused = self.refused or why

    def to_json(self) -> dict:
        return {"max_spill_fill_bytes": self.max_spill_fill_bytes, "members": list(self.members),
                "groups_formed": self.groups_formed, "refused": self.refused or None}
