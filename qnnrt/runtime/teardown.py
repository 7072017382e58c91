"""The one order a process that holds contexts closes what it owns, whichever it is (a Program in
the main process, a PD worker): the pool (its contexts, newest first: they deregister their shared
buffers before contextFree), what else lives on the backend (shared memory, QNN profiles), the
binaries (their mappings), other files the loader opened, the backend and device, the heap
profiler's final mark (QNN returns per-backend host memory only when the backend goes), and last
the trace the process writes (every free in it).
Every step runs even when an earlier one fails; the first failure is raised at the end."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger("qnnrt.runtime")


class Closable(Protocol):
    def close(self) -> None: ...


@dataclass
class Holdings:
    """What one process holds, by kind; `None` where it holds none."""
    pool: Closable | None = None
    on_backend: list[Closable] = field(default_factory=list)   # shared memory, profiles
    binaries: Iterable[Closable] = ()
    owned: list[Closable] = field(default_factory=list)        # e.g. the mapped .pte file
    backend: Closable | None = None
    heap: object | None = None                                 # a profiling.heap.HeapProfiler
    trace: Closable | None = None                              # a profiling.trace.Tracer to write


def close_all(h: Holdings) -> None:
    """Close `h` in the one order (module docstring)."""
    steps: list[Callable[[], None]] = []
    if h.pool is not None:
        steps.append(h.pool.close)
    steps += [c.close for c in h.on_backend]
    steps += [b.close for b in h.binaries]
    steps += [c.close for c in h.owned]
    if h.backend is not None:
        steps.append(h.backend.close)
    heap = h.heap
    if heap is not None:
        if h.backend is not None:
            steps.append(lambda: heap.mark("backend_freed"))  # type: ignore[attr-defined]
        steps.append(heap.close)  # type: ignore[attr-defined]
    if h.trace is not None:
        steps.append(h.trace.close)
    first: BaseException | None = None
    for step in steps:
        try:
            step()
        except BaseException as e:  # noqa: BLE001 - the rest must still be closed
            log.error("closing failed (%s: %s); closing the rest", type(e).__name__, e)
            first = first or e
    if first is not None:
        raise first
