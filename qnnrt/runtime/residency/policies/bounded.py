"""bounded:K / bounded:<size>: at most K contexts live, or at most that many planned PD bytes; the
one whose next use is farthest goes first, and the next one is created in the background while a
graph runs (a creation overlaps an execution instead of adding to the latency)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from qnnrt.errors import QnnrtError
from qnnrt.runtime.residency.order import CallOrder
from qnnrt.runtime.residency.policy import Bound, Residency, register, whole_number
from qnnrt.units import SIZE_RE, to_bytes


@register
@dataclass(frozen=True)
class Bounded(Residency):
    name = "bounded"
    usage = "bounded:K (a count), bounded:<size> (e.g. bounded:2GB)"
    max_live: int | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if (self.max_live is None) == (self.max_bytes is None):
            raise QnnrtError("bounded residency: give either max_live (a count) or max_bytes")

    @classmethod
    def from_argument(cls, arg: str | None, text: str) -> Bounded:
        m = re.fullmatch(SIZE_RE, arg or "")
        if m is None:
            raise QnnrtError(f"residency {text!r}: write bounded:K (a count of contexts) or "
                             f"bounded:<size> (e.g. bounded:2GB)")
        if m.group("unit"):
            return cls(max_bytes=to_bytes(m.group("num"), m.group("unit")))
        return cls(max_live=whole_number(m.group("num"), text, "K"))

    def __str__(self) -> str:
        return f"bounded:{self.max_live}" if self.max_live else f"bounded:{self.max_bytes}B"

    @property
    def bound(self) -> Bound:
        return Bound(max_live=self.max_live, max_bytes=self.max_bytes, evict_when_full=True)

    def prefetch(self, order: CallOrder, position: int, current: str) -> str | None:
        return order.next_after(position, current)
