"""Opening a program's pool and its hosts: one PD in this process (a ContextPool applying the
residency policy), or, when the placement spreads the contexts, every PD resident (the multi-PD
pool: PD 0 here, the others in worker processes). The one place that picks between them."""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qnnrt.core import Backend, ContextBinary
from qnnrt.profiling.heap import HeapProfiler
from qnnrt.profiling.observers import pool_hooks
from qnnrt.profiling.pd_log import pd_estimate_from_log
from qnnrt.profiling.trace import Tracer
from qnnrt.runtime.hosts import Hosts, Pool, ThisProcess
from qnnrt.runtime.pd_budget import Budget
from qnnrt.runtime.pd_plan import Placement
from qnnrt.runtime.performance import MULTI_PD_NO_SHARED_BUFFERS, Performance
from qnnrt.runtime.residency import ContextPool, Residency


@dataclass(frozen=True)
class PoolOptions:
    """How the contexts are created and observed, whichever pool holds them."""
    residency: Residency
    log_level: str = "warn"
    heap: HeapProfiler | None = None
    profiler: Any = None                  # a CreationProfiler (per-creation QNN profiles)
    watch: Any = None                     # vetting's StepWatch
    spill_fill_group: Any = None
    performance: Performance | None = None
    budget: Budget | None = None
    predictions: dict[str, int | None] | None = None
    on_capacity: Callable[[int], None] | None = None   # a run found the PD capacity
    progress: Callable[[int, int], None] | None = None
    tracer: Tracer | None = None          # the run's trace (each PD worker traces into its own)


def open_pool(backend: Backend, binaries: dict[str, ContextBinary], placement: Placement | None,
              o: PoolOptions) -> tuple[Pool, Hosts]:
    """The pool and hosts of a program, with what the policy creates before the first call
    created (every context, for a multi-PD placement)."""
    performance = o.performance
    if placement is not None:
        from qnnrt.runtime.pd_fleet import MultiPdPool
        fleet = MultiPdPool(backend, binaries, placement, o.residency, log_level=o.log_level,
                            progress=o.progress, heap=o.heap, tracer=o.tracer,
                            performance=performance.choice if performance else None,
                            pool_options={"profiler": o.profiler, "watch": o.watch,
                                          "spill_fill_group": o.spill_fill_group})
        if performance is not None:
            performance.followers.append(fleet.vote)
            performance.no_shared_memory(MULTI_PD_NO_SHARED_BUFFERS)
        return fleet, fleet
    budget = o.budget
    pool = ContextPool(backend, binaries, o.residency, hooks=pool_hooks(o.heap, o.tracer),
                       pd_estimate=pd_estimate_from_log,
                       profiler=o.profiler, predictions=o.predictions,
                       budget_bytes=budget.bytes if budget else None,
                       budget_source=budget.source if budget else None, on_capacity=o.on_capacity,
                       watch=o.watch, spill_fill_group=o.spill_fill_group)
    with contextlib.ExitStack() as undo:   # a failed preload frees what it made
        undo.callback(pool.close)
        pool.preload(o.progress)
        undo.pop_all()
    return pool, ThisProcess(backend, performance.shared_memory if performance else None)
