"""auto (the default): lazy plus prefetch, kept within this backend's PD budget by predicted bytes
(given, learned or the simulator's), so it evicts before a creation would fail; without a budget it
learns one from the first creation that fails for lack of PD, then evicts and retries. A program
that one PD cannot hold is spread over PD worker processes instead (runtime/hosts/pd/placement.py `place`)."""
from __future__ import annotations

from dataclasses import dataclass

from qnnrt.runtime.residency.order import CallOrder
from qnnrt.runtime.residency.policy import Bound, Residency, Spread, register


@register
@dataclass(frozen=True)
class Auto(Residency):
    name = "auto"

    @property
    def bound(self) -> Bound:
        return Bound(pd_budget=True, evict_when_full=True)

    @property
    def spread(self) -> Spread:
        return Spread(forced=False)

    def prefetch(self, order: CallOrder, position: int, current: str) -> str | None:
        return order.next_after(position, current)
