"""This process alone: every context in its own PD, a `ContextPool` applying the residency policy.
The kind that always holds a program (the last of `hosts.KINDS`)."""
from __future__ import annotations

import contextlib

import numpy as np
from numpy.typing import DTypeLike

from qnnrt.core import Backend, GraphSpec
from qnnrt.core.call import BoundCall
from qnnrt.core.shared_buffer import SharedMemory
from qnnrt.errors import QnnrtError
from qnnrt.profiling.observers import pool_hooks
from qnnrt.profiling.pd_log import pd_estimate_from_log
from qnnrt.runtime.hosts import HostRequest, OpenedHosts, Sizing
from qnnrt.runtime.plan_context import PlanContext
from qnnrt.runtime.residency import ContextPool
from qnnrt.runtime.segments import Segment
from qnnrt.runtime.steps import SegmentStep


class ThisProcess:
    """One host: every context in this process's own PD. Planned buffers are ordinary arrays, or
    rpcmem with shared buffers (bound into graph calls as mem handles)."""

    def __init__(self, backend: Backend, shared_memory: SharedMemory | None = None) -> None:
        self.backend, self.shared_memory = backend, shared_memory

    def host_of(self, key: str) -> int:
        return 0

    def bound_call(self, key: str, spec: GraphSpec) -> BoundCall:
        return BoundCall(self.backend, spec)

    def buffer(self, shape: tuple, dtype: DTypeLike) -> np.ndarray:
        if self.shared_memory is not None:
            return self.shared_memory.array(tuple(shape), dtype, "a planned buffer")
        return np.zeros(shape, dtype)

    def graph_calls_elsewhere(self) -> int:
        return 0

    def segment_step(self, segment: Segment, template: list, context: PlanContext) -> SegmentStep:
        raise QnnrtError(f"a plan segment for host {segment.host} in a program of one host")


class ThisProcessKind:
    name = "this process"

    def open(self, request: HostRequest, sizing: Sizing) -> OpenedHosts:
        """A ContextPool over every context, with what the policy creates before the first call
        created (a failed preload frees what it made)."""
        o, budget = request.options, sizing.budget
        pool = ContextPool(request.backend, request.binaries, o.residency,
                           hooks=pool_hooks(o.heap, o.tracer), pd_estimate=pd_estimate_from_log,
                           profiler=o.profiler, predictions=sizing.needs,
                           budget_bytes=budget.bytes if budget else None,
                           budget_source=budget.source if budget else None,
                           on_capacity=sizing.learned, watch=o.watch,
                           spill_fill_group=o.spill_fill_group)
        with contextlib.ExitStack() as undo:
            undo.callback(pool.close)
            pool.preload(o.progress)
            undo.pop_all()
        performance = o.performance
        return OpenedHosts(pool, ThisProcess(request.backend,
                                             performance.shared_memory if performance else None))


KIND = ThisProcessKind()
