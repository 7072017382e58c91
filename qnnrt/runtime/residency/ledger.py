"""A pool's bookkeeping: its counts, and the PD bytes it plans with (each context's predicted need
and QNN's reported reservation, the bound it keeps and what failed creations taught it)."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from qnnrt.core import live_contexts_in_process
from qnnrt.profiling.pd_log import pd_available_from_log
from qnnrt.runtime.residency.policy import Bound


@dataclass
class ResidencyStats:
    creates: int = 0
    frees: int = 0
    evictions: int = 0
    reloads: int = 0
    create_failures: int = 0
    pd_failures_handled: int = 0
    prefetches: int = 0
    prefetch_hits: int = 0
    peak_live: int = 0
    peak_pd_bytes: int = 0
    capacity_found: int | None = None
    capacity_bytes_found: int | None = None
    peak_predicted_bytes: int | None = None
    create_seconds: float = 0.0
    wait_seconds: float = 0.0
    ever_created: set = field(default_factory=set)


def others_needs(mine: Iterable[object]) -> list[int | None]:
    """Predicted reservations of the live contexts of other programs in this process (not `mine`):
    the PD is the process's, so they count against its budget."""
    ids = {id(c) for c in mine}
    return [c.binary.pd_need().total for c in live_contexts_in_process() if id(c) not in ids]


class PdLedger:
    """The bound a pool keeps (a count and / or bytes) and the bytes it measures against it.
    Not locked: the pool calls it with its own lock held."""

    def __init__(self, bound: Bound, stats: ResidencyStats, predictions: dict[str, int | None] | None,
                 budget_bytes: int | None, budget_source: str | None) -> None:
        self.stats = stats
        self.predictions: dict[str, int | None] = dict(predictions or {})
        self.estimates: dict[str, int] = {}   # QNN's reported reservation, per created context
        self.mismatches: dict[str, tuple[int, int]] = {}  # key -> (predicted, QNN-reported)
        self.capacity: int | None = bound.max_live   # lowered when a creation fails for lack of PD
        self.max_bytes = bound.max_bytes
        self.budget_bytes = budget_bytes if bound.pd_budget else None
        self.budget_source = budget_source if self.budget_bytes is not None else None
        self._capacity_bytes: int | None = None  # from the last PD failure's log

    def reserved(self, key: str) -> int | None:
        """What QNN reserves for `key`: its reported reservation, else the prediction."""
        return self.estimates.get(key) or self.predictions.get(key)

    def need(self, key: str) -> int:
        """Bytes to plan with for `key` (prediction, else QNN's report, else the largest known)."""
        v = self.predictions.get(key) or self.estimates.get(key)
        if v:
            return v
        known = [x for x in list(self.predictions.values()) + list(self.estimates.values()) if x]
        return max(known, default=0)

    def byte_budget(self) -> int | None:
        """The byte budget planned with (bounded:<bytes> and/or the PD budget), or None."""
        vals = [v for v in (self.max_bytes, self.budget_bytes) if v is not None]
        return min(vals) if vals else None

    def over(self, keys: list[str], others: Callable[[], list[int | None]]) -> bool:
        """Whether `keys` (live, pending and the one to add) exceed the bound; `others` gives the
        reservations of other programs' contexts in the process (asked only with a PD budget)."""
        if self.capacity is not None and len(keys) > self.capacity:
            return True
        limits = [] if self.max_bytes is None else [self.max_bytes]
        if self.budget_bytes is not None:
            limits.append(self.budget_bytes - sum(n or 0 for n in others()))
        if not limits:
            return False
        return sum(self.need(k) for k in keys) > min(limits)

    def created(self, key: str, estimate: int | None) -> None:
        """QNN's reported reservation of a new context, beside the prediction."""
        if estimate:
            self.estimates[key] = estimate
            pred = self.predictions.get(key)
            if pred is not None and pred != estimate:
                self.mismatches[key] = (pred, estimate)

    def note_failure(self, lines: list[str], live: set[str], live_before: set[str],
                     others: list[int | None]) -> None:
        """A creation failed for lack of PD: the capacity is the live reservations + the space QNN
        said was available, exactly, when the live set did not change during the attempt."""
        avail = pd_available_from_log(lines)
        parts = [self.reserved(k) for k in live] + others
        if avail is None or live != live_before or any(p is None for p in parts):
            self._capacity_bytes = None
        else:
            self._capacity_bytes = sum(p for p in parts if p is not None) + avail

    def found_capacity(self, live_now: int) -> int | None:
        """After a creation failed for lack of PD: plan by the exact byte capacity when the failure
        line gave it (returned, to be remembered), else by the live count."""
        s = self.stats
        cap = max(1, live_now)
        s.capacity_found = cap if s.capacity_found is None else min(s.capacity_found, cap)
        s.pd_failures_handled += 1
        learned, self._capacity_bytes = self._capacity_bytes, None
        if learned is None:
            self.capacity = cap if self.capacity is None else min(self.capacity, cap)
            return None
        self.budget_bytes, self.budget_source = learned, "found"
        s.capacity_bytes_found = learned
        return learned

    def note_peaks(self, live: Iterable[str]) -> None:
        """Peak live contexts and peak PD in use (sum of live contexts' estimates)."""
        keys = list(live)
        s = self.stats
        s.peak_live = max(s.peak_live, len(keys))
        s.peak_pd_bytes = max(s.peak_pd_bytes, sum(self.estimates.get(k, 0) for k in keys))
        preds = [self.predictions.get(k) for k in keys]
        if all(p is not None for p in preds):
            s.peak_predicted_bytes = max(s.peak_predicted_bytes or 0,
                                         sum(p for p in preds if p is not None))

    def predicted_total(self) -> int | None:
        """The sum of the predicted PD needs, when every context has one."""
        needs = [v for v in self.predictions.values() if v is not None]
        return sum(needs) if self.predictions and len(needs) == len(self.predictions) else None

    def summary(self) -> dict:
        """The PD part of the pool's summary."""
        s = self.stats
        return {"pd_estimate_bytes": dict(self.estimates),
                "pd_estimate_total_bytes": sum(self.estimates.values()),
                "pd_peak_bytes": s.peak_pd_bytes,
                "pd_predicted_bytes": dict(self.predictions),
                "pd_predicted_total_bytes": self.predicted_total(),
                "pd_peak_predicted_bytes": s.peak_predicted_bytes,
                "pd_mismatches": [{"key": k, "predicted_bytes": p, "reported_bytes": r}
                                  for k, (p, r) in self.mismatches.items()],
                "pd_budget_bytes": self.byte_budget(),
                "pd_budget_source": self.budget_source or ("bounded" if self.max_bytes else None),
                "capacity_bytes_found": s.capacity_bytes_found}
