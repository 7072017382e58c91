"""A pool's hooks when several observers watch it: the heap profiler and the tracer hear every
creation and free in the same order (runtime/hooks.py PoolHooks); the heap profiler alone decides
the DSP probe."""
from __future__ import annotations

from typing import Any

from qnnrt.profiling.heap import HeapProfiler
from qnnrt.profiling.heap_sources import DspHeapSource
from qnnrt.profiling.trace import PoolTrace, Tracer

__all__ = ["PoolObservers", "pool_hooks"]


class PoolObservers:
    """The heap profiler's and the tracer's pool hooks as one."""

    def __init__(self, heap: HeapProfiler, tracer: PoolTrace) -> None:
        self.heap, self.tracer = heap, tracer

    @property
    def dsp(self) -> DspHeapSource | None:
        return self.heap.dsp

    def before_create(self, context: str) -> None:
        self.heap.before_create(context)
        self.tracer.before_create(context)

    def after_create(self, context: str, ok: bool, pd_estimate_bytes: int | None = None) -> None:
        self.heap.after_create(context, ok, pd_estimate_bytes)
        self.tracer.after_create(context, ok, pd_estimate_bytes)

    def before_free(self, context: str, evicted: bool = False) -> None:
        self.heap.before_free(context, evicted)
        self.tracer.before_free(context, evicted)

    def after_free(self, context: str, evicted: bool = False) -> None:
        self.heap.after_free(context, evicted)
        self.tracer.after_free(context, evicted)

    def mark(self, event: str, **info: Any) -> None:
        self.heap.mark(event, **info)
        self.tracer.mark(event, **info)

    def record_dsp_events(self, context: str, events: list[dict[str, Any]]) -> int:
        return self.heap.record_dsp_events(context, events)


def pool_hooks(heap: HeapProfiler | None,
               tracer: Tracer | None) -> HeapProfiler | PoolTrace | PoolObservers | None:
    """What one pool is told through: the heap profiler, the tracer (this pool's view of it), both,
    or nothing. With both, the tracer also receives each heap sample (its heap counters)."""
    if tracer is None:
        return heap
    if heap is None:
        return PoolTrace(tracer)
    heap.listen(tracer.heap_sampled)
    return PoolObservers(heap, PoolTrace(tracer))
