"""The messages between a loading process and its vetting child (runtime/vet.py, vet_child.py),
over a runtime/child.py channel: the job goes as one request; the child reports each step as it
starts and each binary as it is done (progress frames on that request), then replies once.

A step's report comes before its QNN call, so a crash leaves the last step reported as the one that
crashed, and a step that never ends is the one that hangs. The messages travel on the typed wire
(runtime/wire.py), as the PD workers' do."""
from __future__ import annotations

from dataclasses import dataclass

from qnnrt.runtime.wire import Wire

JOB_ID = 1   # the one request of a vetting child


@dataclass(frozen=True)
class VetItem:
    name: str      # the binary as messages name it
    path: str      # a file the child maps (a temporary copy for bytes held in memory)
    size: int


@dataclass(frozen=True)
class VetJob:
    items: tuple[VetItem, ...]
    mode: str                  # "auto" | "execute" | "create"
    execute_bytes: int         # "auto" runs a graph when binary + I/O fit this
    backend_lib: str | None = None
    soc: str | int | None = None


@dataclass(frozen=True)
class StepStarted:
    """Item `item` starts `stage` (info, create, execute) over `nbytes` (the stall timeout grows
    with them); `graph` names the graph an execute step runs."""
    item: int
    stage: str
    nbytes: int
    graph: str = ""


@dataclass(frozen=True)
class ItemDone:
    """`verdict`: ok (with the graphs it ran), rejected (QNN refused it cleanly), or partial (the
    child ran out of memory / PD, or a transient device failure: no verdict)."""
    item: int
    verdict: str
    detail: str = ""
    graphs_run: int = 0


@dataclass(frozen=True)
class JobDone:
    items: int


WIRE = Wire([VetJob, StepStarted, ItemDone, JobDone])
