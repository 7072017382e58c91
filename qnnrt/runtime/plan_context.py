"""What a plan is built with: the narrow part of a Program its plans and segments read (the pool,
the recovery policy, the hosts, the observers, the shared memory, the counters), typed, instead of
the Program itself. Made by `Program` for each plan it builds; nothing here changes during a run
but the counters."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import DTypeLike

if TYPE_CHECKING:
    from qnnrt.core import ContextBinary
    from qnnrt.core.shared_buffer import SharedMemory
    from qnnrt.profiling.trace import Tracer
    from qnnrt.runtime.hosts import Hosts, Pool
    from qnnrt.runtime.plan import CallObservers
    from qnnrt.runtime.recovery import Recovery


class Counters:
    """What plans count as it happens, read from any thread (progress lines): the graph calls this
    process made."""
    __slots__ = ("graph_calls",)

    def __init__(self) -> None:
        self.graph_calls = 0


@dataclass(frozen=True)
class PlanContext:
    """A plan's view of its program. `timed`: the plan times its graph calls and CPU ops (a program
    keeps a plan of each kind)."""
    binaries: Mapping[str, ContextBinary]
    pool: Pool
    recovery: Recovery
    hosts: Hosts
    counters: Counters
    timed: bool
    observers: CallObservers | None = None    # profiling and tracing of each graph call
    tracer: Tracer | None = None
    shared_memory: SharedMemory | None = None  # graph I/O in rpcmem (none under multi-PD)

    def buffer(self, shape: tuple, dtype: DTypeLike) -> np.ndarray:
        """A zeroed array for a plan's intermediate, which every host reads and writes in place."""
        return self.hosts.buffer(shape, dtype)
