"""How a program's contexts are held, typed end to end: `PoolOptions` (how contexts are created and
observed, whichever kind of host holds them) and, for a PD of a multi-PD program, `GroupSettings`
(its contexts' predicted PD bytes and the budget it evicts under), which travels as itself to the
PD's worker (runtime/hosts/pd/protocol.py `WorkerConfig`). `group_pool` is the one pool factory of
a PD's group: the main process's PD 0 and every worker make theirs with it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qnnrt.core import Backend, ContextBinary
from qnnrt.core.spill_fill import SpillFillGroup
from qnnrt.profiling.heap import HeapProfiler
from qnnrt.profiling.pd_log import pd_estimate_from_log
from qnnrt.profiling.trace import Tracer
from qnnrt.runtime.hooks import CreationProfiler, PoolHooks
from qnnrt.runtime.performance import Performance
from qnnrt.runtime.residency.policy import Residency
from qnnrt.runtime.residency.pool import ContextPool

if TYPE_CHECKING:
    from qnnrt.runtime.vet.watch import StepWatch


@dataclass(frozen=True)
class PoolOptions:
    """How the contexts are created and observed, whichever kind of host holds them."""
    residency: Residency
    log_level: str = "warn"
    heap: HeapProfiler | None = None
    profiler: CreationProfiler | None = None   # per-creation QNN profiles
    watch: StepWatch | None = None        # vetting's step watch
    spill_fill_group: SpillFillGroup | None = None
    performance: Performance | None = None
    progress: Callable[[int, int], None] | None = None
    tracer: Tracer | None = None          # the run's trace (each PD worker traces into its own)


@dataclass(frozen=True)
class GroupSettings:
    """One PD's group of a multi-PD program: each context's predicted PD bytes, and the budget the
    group evicts under when it needs more than one PD holds (a program beyond --max-pds; None:
    every context resident). Plain data: sent as itself to the PD's worker."""
    predictions: dict[str, int | None]
    evict_budget: int | None = None


def group_pool(backend: Backend, binaries: dict[str, ContextBinary], group: GroupSettings,
               hooks: PoolHooks | None = None, options: PoolOptions | None = None) -> ContextPool:
    """The pool of one PD's contexts: every context resident, or `auto` under the group's evict
    budget, with the placement's call order. The main process's PD 0 passes its `options` (its
    step watch, creation profiler and spill-fill group); a worker has none of those."""
    pool = ContextPool(backend, binaries, "auto" if group.evict_budget else "eager",
                       pd_estimate=pd_estimate_from_log, predictions=group.predictions, hooks=hooks,
                       budget_bytes=group.evict_budget, budget_source="placement",
                       profiler=options.profiler if options else None,
                       watch=options.watch if options else None,
                       spill_fill_group=options.spill_fill_group if options else None)
    pool.set_order(list(binaries))
    return pool
