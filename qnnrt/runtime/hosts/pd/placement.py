"""Planning residency by bytes on a static call order: peaks per policy and Belady's minimum number
of context creations per iteration under a PD budget (evict the live context used farthest ahead).

With sizes this is the greedy farthest-next-use rule (exact Belady for equal sizes; for unequal sizes
the optimum is NP-hard and this is the rule the pool applies, so it is what a run reaches)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from qnnrt.runtime.residency.order import CallOrder, farthest_next_use


def belady_creations(order: Sequence[str], sizes: dict[str, int], budget: int,
                     iterations: int = 3) -> tuple[int, int] | None:
    """(creations in a steady-state iteration, peak live bytes) repeating `order` under `budget`
    with farthest-next-use eviction; None when a single context does not fit."""
    if not order:
        return 0, 0
    if any(sizes[k] > budget for k in set(order)):
        return None
    calls = CallOrder(order)
    live: set[str] = set()
    used = peak = 0
    creations = 0
    for it in range(iterations):
        creations = 0
        for pos, key in enumerate(order):
            if key in live:
                continue
            while used + sizes[key] > budget:
                victim = farthest_next_use(live, calls, pos)
                assert victim is not None  # a context alone fits (checked above): something is live
                live.remove(victim)
                used -= sizes[victim]
            live.add(key)
            used += sizes[key]
            creations += 1
            peak = max(peak, used)
    return creations, peak


def plan(orders: dict[str, list[str]], sizes: dict[str, int | None], budget: int | None) -> dict:
    """Peaks and creations per iteration for each method's order and for the methods interleaved
    (one call of each, in turn). Unknown sizes make the byte figures None."""
    known = all(v is not None for v in sizes.values())
    total = sum(v for v in sizes.values() if v is not None) if known else None
    out: dict = {"total_bytes": total, "budget_bytes": budget,
                 "eager_fits": None if total is None or budget is None else total <= budget,
                 "methods": {}}
    runs = dict(orders)
    if len(orders) > 1:
        runs["(interleaved)"] = [k for o in orders.values() for k in o]
    for name, order in runs.items():
        used = list(dict.fromkeys(order))
        row: dict = {"graph_calls": len(order), "contexts_used": len(used)}
        if not known:
            row.update(peaks=None, min_creations_per_iteration=None, residency=None)
            out["methods"][name] = row
            continue
        sz = {k: int(sizes[k]) for k in used}  # type: ignore[arg-type]
        lazy = sum(sz.values())
        peaks = {"eager": total, "lazy": lazy, "sequential": max(sz.values(), default=0)}
        row["peaks"] = peaks
        if budget is None:
            row.update(min_creations_per_iteration=None, residency=None)
        elif lazy <= budget:
            peaks["auto"] = lazy
            row.update(min_creations_per_iteration=0,
                       residency="eager" if total is not None and total <= budget else "lazy (or auto)")
        else:
            r = belady_creations(order, sz, budget)
            if r is None:
                row.update(min_creations_per_iteration=None,
                           residency="none: a context alone exceeds the budget")
            else:
                peaks["auto"] = peaks[f"bounded:{budget}B"] = r[1]
                row.update(min_creations_per_iteration=r[0],
                           residency=f"auto with this budget (or bounded:{budget}B)")
        out["methods"][name] = row
    return out


# -- multi-PD placement --------------------------------------------------------------------------
@dataclass(frozen=True)
class Placement:
    """Which contexts go on which PD: `groups[i]` are PD i's context keys, in first-use order."""
    groups: list[list[str]]
    sizes: dict[str, int]
    budget_bytes: int
    budget_source: str | None = None

    @property
    def pd_bytes(self) -> list[int]:
        return [sum(self.sizes[k] for k in g) for g in self.groups]

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes.values())

    @property
    def evicting(self) -> list[int]:
        """The PDs whose contexts exceed the budget: they create and evict as one PD does."""
        return [i for i in range(len(self.groups)) if self.evict_budget(i) is not None]

    def evict_budget(self, pd: int, beside: int = 0) -> int | None:
        """The budget PD `pd` evicts under when its group, with `beside` bytes already in that PD
        (other programs' contexts), exceeds it; None when all its contexts stay resident."""
        return self.budget_bytes if self.pd_bytes[pd] + beside > self.budget_bytes else None

    def to_dict(self) -> dict:
        return {"pds": len(self.groups), "evicting": self.evicting, "budget_bytes": self.budget_bytes,
                "budget_source": self.budget_source, "total_bytes": self.total_bytes,
                "groups": [{"pd": i, "contexts": len(g), "first": g[0], "last": g[-1],
                            "predicted_bytes": b}
                           for i, (g, b) in enumerate(zip(self.groups, self.pd_bytes))]}


def first_use_order(orders: dict[str, list[str]], keys: Sequence[str] = ()) -> list[str]:
    """Every context once, in the order the methods first use it (methods in turn), then the
    contexts no method uses: a context shared by methods appears once, so it has one place."""
    seen = dict.fromkeys(k for o in orders.values() for k in o)
    for k in keys:
        seen.setdefault(k, None)
    return list(seen)


def _chunks(sizes: list[int], limit: int) -> list[int]:
    """Greedy split of `sizes` into consecutive chunks of at most `limit` bytes: the chunk lengths."""
    out: list[int] = []
    used = n = 0
    for s in sizes:
        if n and used + s > limit:
            out.append(n)
            used = n = 0
        used += s
        n += 1
    if n:
        out.append(n)
    return out


def place(order: Sequence[str], sizes: dict[str, int | None], budget: int, max_pds: int,
          pds: int | None = None, budget_source: str | None = None, evict: bool = False) -> Placement:
    """Split `order` (first-use order, each context once) into the fewest consecutive groups that
    each fit `budget` (or exactly `pds` groups), as balanced as consecutive groups allow: the
    largest group is as small as possible (a search over the byte limit), so the result depends
    only on the order and the sizes. Raises QnnrtError when the sizes are unknown, a context alone
    exceeds the budget, or more than `max_pds` PDs would be needed (with `evict`, the contexts are
    then split over `max_pds` PDs as evenly, and the PDs over budget evict: `Placement.evicting`)."""
    from qnnrt.errors import QnnrtError
    if not order:
        raise QnnrtError("multi-PD residency: the program has no contexts to place")
    unknown = [k for k in order if sizes.get(k) is None]
    if unknown:
        raise QnnrtError(f"multi-PD residency needs each context's PD need; it is unknown for "
                         f"{len(unknown)} context(s) (e.g. {unknown[0]!r}; `qnnrt inspect --pd` "
                         f"says why). Use --residency auto.")
    sz = [int(sizes[k]) for k in order]  # type: ignore[arg-type]
    big = [k for k, s in zip(order, sz) if s > budget]
    if big:
        raise QnnrtError(f"context {big[0]!r} alone needs {sizes[big[0]]} B of PD, more than the "
                         f"budget of {budget} B: no placement can hold it")
    fewest = len(_chunks(sz, budget))
    n = fewest if pds is None else int(pds)
    if n < 1:
        raise QnnrtError(f"multi-PD residency: the number of PDs must be >= 1 (got {n})")
    if n < fewest:
        raise QnnrtError(f"the program needs {fewest} PDs of {budget} B (its contexts need "
                         f"{sum(sz)} B); {n} were asked for. Use multi-pd:{fewest} or more.")
    if n > max_pds and evict:  # each of max_pds PDs holds what it can and evicts the rest
        even = place(order, sizes, sum(sz), max_pds, min(max_pds, len(sz)), budget_source)
        return Placement(even.groups, even.sizes, budget, budget_source)
    if n > max_pds:
        raise QnnrtError(f"the program needs {n} PDs of {budget} B (its contexts need {sum(sz)} B); "
                         f"at most {max_pds} allowed (--max-pds)")
    n = min(n, len(sz))
    lo, hi = max(max(sz), -(-sum(sz) // n)), budget
    while lo < hi:  # the smallest limit that splits into at most n groups
        mid = (lo + hi) // 2
        if len(_chunks(sz, mid)) <= n:
            hi = mid
        else:
            lo = mid + 1
    lengths = _chunks(sz, lo)
    groups, i = [], 0
    for ln in lengths:
        groups.append(list(order[i:i + ln]))
        i += ln
    return Placement(groups, {k: int(sizes[k]) for k in order}, budget,  # type: ignore[arg-type]
                     budget_source)
