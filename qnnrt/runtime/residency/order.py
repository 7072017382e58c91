"""The static call order of contexts and the one eviction rule that reads it: farthest next use.

A method's graph calls go to contexts in an order known before it runs, and the next run repeats
it, so the order is cyclic. Evicting the context whose next use is farthest away is Belady's
optimum for equal sizes; the pool (policies' `victim`) and the planner (hosts/pd/placement.py `belady_creations`)
both evict by `farthest_next_use`, so what the planner predicts is what a run does."""
from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence


class CallOrder:
    """Context keys in the order of a method's graph calls (one key per call), cyclic."""

    def __init__(self, keys: Sequence[str] = ()) -> None:
        self.keys: list[str] = list(keys)
        self._positions: dict[str, list[int]] = {}
        for i, k in enumerate(self.keys):
            self._positions.setdefault(k, []).append(i)

    def __len__(self) -> int:
        return len(self.keys)

    def next_use(self, key: str, position: int) -> float:
        """Calls from `position` to the next use of `key` after it (inf: `key` is never used)."""
        uses = self._positions.get(key)
        if not uses:
            return float("inf")
        i = bisect.bisect_right(uses, position)
        return uses[i] - position if i < len(uses) else uses[0] + len(self.keys) - position

    def next_after(self, position: int, current: str) -> str | None:
        """The first context after `position` (cyclically) that is not `current`."""
        n = len(self.keys)
        for d in range(1, n):
            k = self.keys[(position + d) % n]
            if k != current:
                return k
        return None

    def first_used(self) -> list[str]:
        """Every key once, in the order of its first use."""
        return list(self._positions)


def farthest_next_use(candidates: Iterable[str], order: CallOrder, position: int) -> str | None:
    """The candidate used farthest after `position` (ties: the greatest key, so a run is
    reproducible); None when there is no candidate."""
    return max(candidates, key=lambda k: (order.next_use(k, position), k), default=None)
