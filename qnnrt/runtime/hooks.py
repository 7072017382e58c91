"""What the runtime expects of the observers it is given: the context pool's hooks (the heap
profiler, the tracer), the profiler of context creations, the execution profiler and the tracer.
Protocols, so an observer is any object with these methods (profiling/ implements them; tests may
bring their own), and mypy checks every call the runtime makes on them."""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from qnnrt.core import Profile
from qnnrt.profiling.trace_events import TraceArgs, TraceBatch

# a QNN profile event tree, as `core.Profile.events()` returns it
ProfileEvents = list[dict[str, Any]]


class DspProbe(Protocol):
    """Whether this backend supports DSP memory profiling (probed on the first creation)."""
    decided: bool
    supported: bool

    def mark_supported(self, note: str = "") -> None: ...

    def mark_unsupported(self, note: str) -> None: ...


class PoolHooks(Protocol):
    """Told about every context creation and free of a pool, in order (the heap profiler)."""

    @property
    def dsp(self) -> DspProbe | None: ...

    def before_create(self, context: str) -> None: ...

    def after_create(self, context: str, ok: bool, pd_estimate_bytes: int | None = None) -> None: ...

    def before_free(self, context: str, evicted: bool = False) -> None: ...

    def after_free(self, context: str, evicted: bool = False) -> None: ...

    def mark(self, event: str, **info: Any) -> None: ...

    def record_dsp_events(self, context: str, events: ProfileEvents) -> int: ...


class CreationProfiler(Protocol):
    """Profiles context creations: a QNN profile for the next creation, then its events."""

    def context_profile(self) -> Profile: ...

    def created(self, key: str, events: ProfileEvents) -> None: ...


class ExecutionRecorder(Protocol):
    """Receives the profile events of context creations and graph executions
    (`profiling.ExecutionProfiler`)."""

    def record(self, phase: str, graph: str | None, context: str, events: ProfileEvents,
               iteration: int | None = None) -> None: ...


class TraceScope(Protocol):
    """A slice being timed (`with tracing.scope(...) as s`); `note` adds arguments to it."""

    def note(self, **args: str | int | float | bool | None) -> None: ...


class Tracing(Protocol):
    """Receives the timeline of a run (`profiling.Tracer`): slices on the calling thread (times from
    `now()`, one clock for every process), each graph call, other processes' events. It is also a
    pool's hooks (PoolHooks), through `profiling.observers.pool_hooks`."""

    def now(self) -> int: ...

    def span(self, name: str, cat: str, start_ns: int, args: TraceArgs | None = None,
             end_ns: int | None = None) -> None: ...

    def scope(self, name: str, cat: str,
              args: TraceArgs | None = None) -> AbstractContextManager[TraceScope]: ...

    def instant(self, name: str, cat: str, args: TraceArgs | None = None) -> None: ...

    def graph_call(self, context: str, graph: str, end_ns: int, seconds: float,
                   events: ProfileEvents | None = None) -> None: ...

    def drain(self) -> TraceBatch | None: ...

    def absorb(self, batch: TraceBatch | None, offset_ns: int = 0) -> None: ...


if TYPE_CHECKING:  # mypy proves that profiling/'s observers are what the runtime expects
    from qnnrt.profiling.exec_profile import ExecutionProfiler
    from qnnrt.profiling.heap import HeapProfiler
    from qnnrt.profiling.observers import PoolObservers
    from qnnrt.profiling.trace import PoolTrace, Tracer

    def _conforms(heap: HeapProfiler, profiler: ExecutionProfiler, tracer: Tracer, pool: PoolTrace,
                  both: PoolObservers) -> tuple[PoolHooks, ExecutionRecorder, Tracing, PoolHooks, PoolHooks]:
        return heap, profiler, tracer, pool, both
