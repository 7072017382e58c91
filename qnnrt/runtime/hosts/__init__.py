"""Where a program's contexts live, as its plans see it: hosts, numbered. Host 0 is this process
(its own PD); host i > 0 is the worker process of PD i. A plan asks which host runs a context's
graphs, gets each graph's call object from its host (the same calling shape wherever it runs),
gets its planned buffers where every host can read them, and has another host run its part of the
plan as one step. `Program` and the plans know only this interface; `open_pool` picks the
implementation: `ThisProcess` for a program in one PD, the multi-PD pool (runtime/pd_fleet.py)
when the placement spreads it over several.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import DTypeLike

from qnnrt.core import Backend, GraphSpec
from qnnrt.core.graph import BoundCall, PreparedCall
from qnnrt.errors import QnnrtError
from qnnrt.runtime.plan import SegmentStep
from qnnrt.runtime.recovery import RecoverablePool
from qnnrt.runtime.residency import ContextSource, Residency
from qnnrt.runtime.segments import Segment

if TYPE_CHECKING:
    from qnnrt.core.shared_buffer import SharedMemory


class Hosts(Protocol):
    def host_of(self, key: str) -> int:
        """0: context `key`'s graphs run in this process; i > 0: in the worker of PD i."""

    def bound_call(self, key: str, spec: GraphSpec) -> PreparedCall:
        """The prepared call a plan binds graph `spec` of context `key` through."""

    def buffer(self, shape: tuple, dtype: DTypeLike) -> np.ndarray:
        """A zeroed planned buffer every host reads and writes in place."""

    def segment_step(self, segment: Segment, template: list, program: Any) -> SegmentStep:
        """The step that has `segment.host` run `segment` on one request."""

    def graph_calls_elsewhere(self) -> int:
        """Graph calls the other hosts made in plan segments, so far."""


class Pool(ContextSource, RecoverablePool, Protocol):
    """What a Program holds its contexts with: what plans and recovery ask, the policy, the
    summary (safe from any thread), and close."""
    residency: Residency

    @property
    def live_keys(self) -> list[str]: ...

    def summary(self) -> dict: ...

    def close(self) -> None: ...


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

    def segment_step(self, segment: Segment, template: list, program: Any) -> SegmentStep:
        raise QnnrtError(f"a plan segment for host {segment.host} in a program of one host")
