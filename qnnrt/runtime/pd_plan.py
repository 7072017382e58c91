"""Planning residency by bytes on a static call order: peaks per policy and Belady's minimum number
of context creations per iteration under a PD budget (evict the live context used farthest ahead).

With sizes this is the greedy farthest-next-use rule (exact Belady for equal sizes; for unequal sizes
the optimum is NP-hard and this is the rule the pool applies, so it is what a run reaches)."""
from __future__ import annotations

import bisect
from collections.abc import Sequence


def _next_use(positions: dict[str, list[int]], n: int, key: str, pos: int) -> int:
    uses = positions[key]
    i = bisect.bisect_right(uses, pos)
    return uses[i] - pos if i < len(uses) else uses[0] + n - pos


def belady_creations(order: Sequence[str], sizes: dict[str, int], budget: int,
                     iterations: int = 3) -> tuple[int, int] | None:
    """(creations in a steady-state iteration, peak live bytes) repeating `order` under `budget`
    with farthest-next-use eviction; None when a single context does not fit."""
    if not order:
        return 0, 0
    if any(sizes[k] > budget for k in set(order)):
        return None
    n = len(order)
    positions: dict[str, list[int]] = {}
    for i, k in enumerate(order):
        positions.setdefault(k, []).append(i)
    live: set[str] = set()
    used = peak = 0
    creations = 0
    for it in range(iterations):
        creations = 0
        for pos, key in enumerate(order):
            if key in live:
                continue
            while used + sizes[key] > budget:
                victim = max(live, key=lambda k: (_next_use(positions, n, k, pos), k))
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
