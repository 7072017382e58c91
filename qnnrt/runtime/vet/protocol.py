"""The messages between a loading process and its vetting child (runtime/vet/policy.py, child.py),
over a runtime/ipc/child.py channel: the job goes as one request; the child reports each step as it
starts and each binary as it is done (progress frames on that request), then replies once.

A step's report comes before its QNN call, so a crash leaves the last step reported as the one that
crashed, and a step that never ends is the one that hangs. The messages travel on the typed wire
(runtime/ipc/wire.py), as the PD workers' do."""
from __future__ import annotations

import os
from dataclasses import dataclass

from qnnrt.runtime.ipc.wire import Wire

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


# a test hook of both processes that make the risky calls (the vetting child, a worker-mode worker)
TEST_DELAY_ENV = "QNNRT_VET_TEST_DELAY"


def hook_delay(stage: str) -> float:
    """Seconds QNNRT_VET_TEST_DELAY asks to sleep before a step of `stage` (0 when not asked)."""
    spec = os.environ.get(TEST_DELAY_ENV, "")
    name, _, secs = spec.partition(":")
    try:
        return float(secs) if name == stage else 0.0
    except ValueError:
        return 0.0
