"""The messages between the main process and a PD worker: typed, each request answered once.

Every request carries an id the main process assigns (`channel.Channel`); the worker's reply
carries the same id, so a reply can never be taken for another request's. Control requests and
their replies are the frozen dataclasses below, encoded by their declared field types
(runtime/ipc/wire.py: `WIRE`, no pickle; `loads` refuses a message that is not of the kind its reader
expects); a graph call, the hot path, is a fixed binary frame (channel.py), its optional tail a
`CallTail` (a segment run's a `SegmentTail`). A failure comes back as a `Failure`
whose payload rebuilds the error on the main side (a QnnError stays a QnnError, with its code,
log and remedy, so the recovery policy reads it as if it were local).

What the main process reports of a worker while it runs (creations, evictions, PD bytes) is read
from a `StatusBlock` the worker writes in shared memory, never asked for over the channel: a
thread reading a summary must not touch a channel another thread is waiting on.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TypeVar

import numpy as np

from qnnrt.errors import QnnError
from qnnrt.profiling.trace_events import TraceBatch
from qnnrt.runtime.hosts.pd.channel import Block
from qnnrt.runtime.hosts.pd.portable import ArenaArray, StepDescriptor
from qnnrt.runtime.performance import Choice
from qnnrt.runtime.residency.groups import GroupSettings
from qnnrt.runtime.ipc.wire import Wire

M = TypeVar("M")
# the main process's pid, in a worker's environment (the worker dies with it)
PARENT_ENV = "QNNRT_PD_WORKER_PARENT"


# -- the worker's configuration --------------------------------------------------------------------
@dataclass(frozen=True)
class TraceSettings:
    """The program traces: the worker records its own part (its track's name, the cap) and sends
    its events with its replies (a `TraceBatch` in Started, Recreated, Closed, call and segment
    replies)."""
    process: str
    max_events: int


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs to open its backend and create its group of contexts."""
    backend_lib: str
    soc: int | str | None
    log_level: str
    binaries: dict[str, str | bytes]          # key -> path, or the binary's bytes
    names: dict[str, str]                     # key -> the binary's name in messages
    status: Block                             # where the worker writes its StatusBlock
    group: GroupSettings                      # its contexts' predicted PD bytes, evict budget
    heap: bool = False
    signed_pd: bool = False
    device_id: int = 0
    htp_arch: int | None = None               # needed to select a device other than 0
    performance: Choice | None = None
    trace: TraceSettings | None = None


# -- control requests -------------------------------------------------------------------------------
# a value sent by value: an array, or a scalar a .pte computes on the CPU
LiveValue = np.ndarray | bool | int | float | str | None | list | tuple
# what a segment's slot starts from in the worker: an arena array by reference, or a constant
TemplateValue = ArenaArray | LiveValue

@dataclass(frozen=True)
class Start:
    config: WorkerConfig


@dataclass(frozen=True)
class Bind:
    """Prepare graph `graph` of context `key` as call `call` over arena blocks."""
    call: int
    key: str
    graph: str
    inputs: tuple[Block, ...]
    outputs: tuple[Block, ...]


@dataclass(frozen=True)
class Point:
    """From now on, tensor `index` of call `call` reads (input) or writes (output) `block`."""
    call: int
    output: bool
    index: int
    block: Block


@dataclass(frozen=True)
class ProfileCalls:
    """Record every run of call `call` into the worker's QNN profile at `level`."""
    call: int
    level: str


@dataclass(frozen=True)
class Recreate:
    """Recovery: free and create `keys` again (with the backend, for a DSP restart)."""
    keys: tuple[str, ...]
    restart_backend: bool


@dataclass(frozen=True)
class Vote:
    choice: Choice


@dataclass(frozen=True)
class InstallSegment:
    """A plan segment this worker runs on request from now on: its steps as descriptors the
    worker rebuilds (runtime/hosts/pd/portable.py), the values its slot list of `slots` starts from (arena
    arrays by reference, constants by value), and the slots the rest of the plan reads."""
    segment: int
    slots: int
    template: dict[int, TemplateValue]
    live_out: tuple[int, ...]
    steps: tuple[StepDescriptor, ...]
    timed: bool = True    # the main process's plan reads the clock (Program.timed, tracing)


@dataclass(frozen=True)
class StageOutputs:
    """Live-out slots of segment `segment` to copy into these arena arrays after each run (the
    main process reads them there instead of receiving them in the reply)."""
    segment: int
    blocks: dict[int, tuple[Block, tuple[int, ...], str]]   # slot -> (block, shape, dtype)


@dataclass(frozen=True)
class Close:
    """Free every context and the backend; the reply carries the heap report when profiling."""


@dataclass(frozen=True)
class Crash:
    """Tests: die the way a crash inside QNN would."""


Request = (Start | Bind | Point | ProfileCalls | Recreate | Vote | InstallSegment | StageOutputs
           | Close | Crash)
REQUESTS = (Start, Bind, Point, ProfileCalls, Recreate, Vote, InstallSegment, StageOutputs, Close,
            Crash)


# -- replies ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Started:
    pid: int
    load_seconds: float
    performance: dict | None          # the worker's vote counts (Performance.vote_counts)
    clock_ns: int = 0                 # the worker's trace clock when it replied
    trace: TraceBatch | None = None   # its start (backend, context creations), when tracing


@dataclass(frozen=True)
class Recreated:
    keys: tuple[str, ...]
    performance: dict | None          # voted again when the backend restarted
    trace: TraceBatch | None = None


@dataclass(frozen=True)
class Voted:
    performance: dict | None


@dataclass(frozen=True)
class Closed:
    heap_report: dict | None
    trace: TraceBatch | None = None   # the frees of its close, and anything not sent yet


@dataclass(frozen=True)
class Done:
    """A request with nothing to report (Bind, Point, ProfileCalls)."""




@dataclass(frozen=True)
class SegmentTail:
    """What a segment run sends back besides its timing: live-out values not staged in the arena
    (the first run's; the main process stages them from then on) and each profiled graph call's
    QNN events, by the step's index in the segment."""
    values: dict[int, LiveValue]
    events: tuple[tuple[int, list[dict]], ...]
    trace: TraceBatch | None = None


@dataclass(frozen=True)
class CallTail:
    """What a graph call's reply carries besides its seconds: the call's QNN profile events (when
    profiled) and the worker's trace events since its last reply (when tracing)."""
    events: list[dict] | None
    trace: TraceBatch | None


@dataclass(frozen=True)
class QnnFields:
    """A QnnError's fields, to rebuild it on the other side."""
    function: str
    code: int
    code_name: str
    message: str
    log_tail: tuple[str, ...]
    remedy: str
    context: str

    @staticmethod
    def of(e: QnnError) -> "QnnFields":
        return QnnFields(e.function, e.code, e.code_name, e.message, tuple(e.log_tail), e.remedy,
                         e.context)


@dataclass(frozen=True)
class Failure:
    """A request failed in the worker (the worker goes on serving)."""
    type_name: str
    message: str
    traceback: str
    code: int | None = None
    qnn: QnnFields | None = None
    internal: bool = False            # not a QnnrtError: a bug in qnnrt, not in the input
    at_step: int | None = None        # the failed step of a segment (its run resumes there)

    @staticmethod
    def of(e: BaseException, tb: str) -> "Failure":
        from qnnrt.errors import QnnrtError
        code = getattr(e, "code", None)
        return Failure(type(e).__name__, str(e), tb, code if isinstance(code, int) else None,
                       QnnFields.of(e) if isinstance(e, QnnError) else None,
                       internal=not isinstance(e, QnnrtError))


Reply = Started | Recreated | Voted | Closed | Done | Failure
REPLIES = (Started, Recreated, Voted, Closed, Done, Failure)

WIRE = Wire(REQUESTS + REPLIES + (CallTail, SegmentTail))


def dumps(message: object) -> bytes:
    """A message of this protocol as bytes (runtime/ipc/wire.py)."""
    return WIRE.dumps(message)


def loads(data: bytes, expected: type[M]) -> M:
    """The message in `data`, of kind `expected` (a ProtocolError otherwise)."""
    return WIRE.loads(data, expected)


def loads_any(data: bytes, expected: tuple[type, ...]) -> object:
    """The message in `data`, of one of the kinds `expected`."""
    return WIRE.loads(data, expected)


# -- the status a worker writes in shared memory --------------------------------------------------
@dataclass(frozen=True)
class WorkerStatus:
    """What a worker's status block says at one moment: its pool's counters, the segment step it
    is at, and the graph calls it made in segments."""
    creates: int
    evictions: int
    frees: int
    pd_estimate_total_bytes: int
    segment_step: int
    segment_graph_calls: int


STATUS_FIELDS = tuple(f.name for f in fields(WorkerStatus))   # one 64-bit word each
STATUS_DTYPE = np.dtype([(name, np.int64) for name in STATUS_FIELDS])
_STEP_WORD = STATUS_FIELDS.index("segment_step")
_CALLS_WORD = STATUS_FIELDS.index("segment_graph_calls")


@dataclass
class StatusBlock:
    """A worker's counters in a shared mapping: the worker writes them as they change, the main
    process reads them from any thread without a request. Each field is one aligned 64-bit word."""
    array: np.ndarray = field(repr=False)   # shape (1,), STATUS_DTYPE

    def __post_init__(self) -> None:
        # a memoryview's item write is a plain store, cheap enough for every graph step of a segment
        self._words = memoryview(self.array.view(np.int64).data)

    def write(self, **values: int) -> None:
        row = self.array[0]
        for name, v in values.items():
            row[name] = v

    def at_step(self, k: int, graph_calls: int) -> None:
        """The step a segment run is at (named if the worker dies there) and the graph calls the
        worker made in segments so far (progress lines count them)."""
        words = self._words
        words[_STEP_WORD] = k
        words[_CALLS_WORD] = graph_calls

    @property
    def segment_graph_calls(self) -> int:
        return int(self._words[_CALLS_WORD])

    def read(self) -> WorkerStatus:
        row = self.array[0]
        return WorkerStatus(*(int(row[name]) for name in STATUS_FIELDS))
