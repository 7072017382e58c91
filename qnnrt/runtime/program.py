"""Program: methods over a set of context binaries, run with a residency policy.

`qnnrt.load` (qnnrt/loader.py) opens the sources and hands a Program its binaries and methods."""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from numpy.typing import DTypeLike

from qnnrt.core import Backend, ContextBinary, Profile
from qnnrt.core.shared_buffer import SharedMemory
from qnnrt.core.spill_fill import SpillFillGroup
from qnnrt.formats.genie import GenieConfig
from qnnrt.errors import FormatError, QnnrtError
from qnnrt.runtime.hooks import ExecutionRecorder
from qnnrt.profiling.heap import HeapProfiler
from qnnrt.runtime.method import Method, MethodBuilder, UnavailableMethod
from qnnrt.runtime.method_spec import Inputs
from qnnrt.profiling.trace import Tracer
from qnnrt.runtime.plan import CallObservers, CallerArrays, Plan, PreparedRun, ReferencePlan, RunTiming
from qnnrt.runtime.plan_context import Counters, PlanContext
from qnnrt.runtime.performance import Performance
from qnnrt.runtime.recovery import DEFAULT_MAX_RECOVERIES, Recovery
from qnnrt.runtime.hosts import DEFAULT_MAX_PDS, HostRequest, Hosts, Pool, open_hosts
from qnnrt.runtime.residency.groups import PoolOptions
from qnnrt.runtime.hosts.this_process import ThisProcess
from qnnrt.runtime.residency import Residency
from qnnrt.runtime.teardown import Closable, Holdings, close_all
from qnnrt.runtime.vet.policy import VetReport
from qnnrt.runtime.vet.watch import StepWatch


@dataclass(frozen=True)
class ProgramOptions:
    """How a Program runs its methods and what watches them (`qnnrt.load` fills it from
    LoadOptions)."""
    residency: str | Residency = "auto"
    heap: HeapProfiler | None = None
    exec_profiler: ExecutionRecorder | None = None
    profile_level: str = "off"
    progress: Callable[[int, int], None] | None = None   # contexts created / to create
    pd_budget: int | None = None          # bytes (None: known or learned)
    watch: StepWatch | None = None        # vetting's step watch
    max_pds: int = DEFAULT_MAX_PDS
    log_level: str = "warn"
    spill_fill_group: SpillFillGroup | None = None
    max_recoveries: int = DEFAULT_MAX_RECOVERIES
    performance: Performance | None = None   # votes, shared buffers, groups (qnnrt.load makes it)
    tracer: Tracer | None = None          # the run's trace, None: not traced
    write_trace: bool = False             # the trace is the program's: written at close
    vet_reports: tuple[VetReport, ...] = ()   # what qnnrt.load vetted before this program
    genie: GenieConfig | None = None      # a Genie bundle's config (formats/genie.py)


class _CreateProfiles:
    """Hands a fresh QNN profile to each context creation and passes its events on."""

    def __init__(self, backend: Backend, level: str, sink: Callable):
        self.backend, self.level, self.sink = backend, level, sink

    def context_profile(self) -> Profile:
        return Profile(self.backend, self.level)

    def created(self, key: str, events: list[dict]) -> None:
        self.sink("context_create", None, key, events)


class Program:
    """Methods sharing a pool of contexts. Use as a context manager, or call close().

    Threads: `run`, `plan` and `close` take the program's lock (a second caller waits for the run
    in progress). Every read (`pool.summary()`, `recovery.summary()`, `performance`, `graph_calls`,
    `iterations`, `timing`, the heap and execution profilers) is safe from any thread at any moment
    of a run and never touches a PD worker's channel; a performance override from another thread
    votes between two graph calls (each worker's channel takes one request at a time)."""

    def __init__(self, path: Path, binaries: dict[str, ContextBinary],
                 method_builder: MethodBuilder, backend: Backend,
                 options: ProgramOptions = ProgramOptions(), owned: Sequence[Closable] = (),
                 constants: dict[str, object] | None = None) -> None:
        o = self.options = options
        self.path = path
        self.constants: dict = dict(constants or {})  # constant methods' values (.pte metadata)
        self.genie = o.genie   # a Genie bundle's config (formats/genie.py), None for other files
        self.backend = backend
        self.binaries = binaries
        self.heap, self.exec_profiler, self.profile_level = o.heap, o.exec_profiler, o.profile_level
        self._lock = threading.RLock()
        self._closed = False
        self.observers: CallObservers | None = None   # attached to every graph call: profiling, tracing
        self.tracer = o.tracer        # the run's trace (profiling.Tracer), None: not traced
        self._owned = list(owned)     # closed after the binaries (e.g. the mapped .pte file)
        self.iterations = 0
        self.counters = Counters()    # this process's graph calls (plans count them as they happen)
        self.vet_reports: list[VetReport] = list(o.vet_reports)   # what qnnrt.load vetted
        self.timing = RunTiming()  # the last run: time inside graphExecute and in CPU ops
        self._plans: dict[tuple[str, bool, bool], Plan] = {}   # by (method, compiled, timed)
        self.compiled = True  # False: run every method on the step-by-step reference path
        self._timed = False   # see `timed`
        self.performance = o.performance
        # graph I/O in rpcmem (runtime/performance.py decided; none under multi-PD)
        self.shared_memory: SharedMemory | None = None
        self.hosts: Hosts = ThisProcess(backend)   # until the hosts are open: nothing elsewhere
        with contextlib.ExitStack() as undo:
            undo.callback(self.close)  # a failure closes what was opened
            self.methods: dict[str, Method] = method_builder()
            if not self.methods and not self.constants:
                raise FormatError(f"{path}: the program has no methods")
            blocked = [m for m in self.methods.values() if isinstance(m, UnavailableMethod)]
            if self.methods and len(blocked) == len(self.methods):  # nothing could ever run
                raise FormatError(blocked[0].reason)
            t0 = time.perf_counter()
            opened = open_hosts(self._host_request())
            self.pool: Pool = opened.pool
            self.hosts = opened.hosts
            self.load_seconds = time.perf_counter() - t0
            if o.performance is not None:
                self.shared_memory = o.performance.shared_memory
            profiled = o.exec_profiler is not None and o.profile_level != "off"
            if profiled or o.tracer is not None:
                self.observers = CallObservers(Profile(backend, o.profile_level) if profiled else None,
                                               o.exec_profiler, o.tracer, lambda: self.iterations)
            self.recovery = Recovery(self.pool, o.max_recoveries, lambda: self.iterations,
                                     self._backend_restarted, o.tracer)
            undo.pop_all()

    def _host_request(self) -> HostRequest:
        """What the hosts are opened with: the contexts, the runnable methods' call orders."""
        o = self.options
        exec_profiler = o.exec_profiler
        profiler = (_CreateProfiles(self.backend, o.profile_level, exec_profiler.record)
                    if exec_profiler is not None and o.profile_level != "off" else None)
        orders = {n: list(m.graph_order) for n, m in self.methods.items()
                  if not isinstance(m, UnavailableMethod)}
        return HostRequest(self.backend, self.binaries, orders, PoolOptions(
            Residency.parse(o.residency), log_level=o.log_level, heap=o.heap, profiler=profiler,
            watch=o.watch, spill_fill_group=o.spill_fill_group, performance=o.performance,
            progress=o.progress, tracer=o.tracer), o.pd_budget, o.max_pds)

    def context(self, timed: bool) -> PlanContext:
        """What a plan is built with (runtime/plan_context.py)."""
        return PlanContext(self.binaries, self.pool, self.recovery, self.hosts, self.counters, timed,
                           self.observers, self.tracer, self.shared_memory)

    def _backend_restarted(self) -> None:
        """Recovery restarted the backend, which closed the vote and the profile it owned: make
        them again (before the failed call runs again)."""
        if self.performance is not None:
            self.performance.start(self.backend)
        if self.observers is not None and self.observers.profile is not None:
            self.observers.restart(Profile(self.backend, self.profile_level))

    @property
    def timed(self) -> bool:
        """Whether runs time their graph calls and CPU ops (`timing`: seconds inside graphExecute
        and in CPU ops, what `qnnrt run` reports as time_breakdown). Off by default: two clock
        reads per graph call and per CPU op are a sixth of the runtime's own cost per call
        (bench/RESULTS.md, "The in-process graph call at ExecuTorch's cost"). A method has a plan
        of each kind, built at its first run of that kind (a prepared method keeps what it was
        made with)."""
        return self._timed

    @timed.setter
    def timed(self, on: bool) -> None:
        with self._lock:
            self._timed = bool(on)

    @property
    def graph_calls(self) -> int:
        """Graph calls made so far, as they happen: this process's, and those PD workers made in
        plan segments (each counts its own in its status block: a worker's part of an iteration
        can take minutes, and a progress line must not stand still meanwhile)."""
        return self.counters.graph_calls + self.hosts.graph_calls_elsewhere()

    @property
    def local_graph_calls(self) -> int:
        """Graph calls this process made so far."""
        return self.counters.graph_calls

    def buffer(self, shape: tuple, dtype: DTypeLike) -> np.ndarray:
        """A zeroed array every host reads and writes in place: what `CallerArrays` of a prepared
        method are made of (under multi-PD, the shared arena)."""
        return self.hosts.buffer(shape, dtype)

    # -- running -----------------------------------------------------------------------------
    def method(self, name: str | int | None = None) -> Method:
        if name is None:
            if "forward" in self.methods:
                return self.methods["forward"]
            runnable = [m for m in self.methods.values() if not isinstance(m, UnavailableMethod)]
            if runnable or self.methods:
                return (runnable or list(self.methods.values()))[0]
            raise QnnrtError(f"{self.path}: the program has only constant methods: "
                             f"{list(self.constants)}")
        if isinstance(name, int):
            names = list(self.methods)
            if not 0 <= name < len(names):
                raise QnnrtError(f"method index {name} out of range; the program has "
                                 f"{len(names)} method(s): {names}")
            return self.methods[names[name]]
        if name not in self.methods and name in self.constants:
            raise QnnrtError(f"{name!r} is a constant method (value {self.constants[name]!r}); "
                             f"see `qnnrt inspect` or Program.constants")
        if name not in self.methods:
            raise QnnrtError(f"no method {name!r}; methods: {list(self.methods)}")
        return self.methods[name]

    def run(self, method: str | int | None = None, inputs: Inputs | None = None,
            **named: np.ndarray) -> dict[str, np.ndarray]:
        """Run a method once (thread-safe: runs of one program take turns).

        Parameters
        ----------
        method : the method's name or index; None: the only one (or ``forward``).
        inputs : a dict by input name, a sequence in input order, or one array; checked and
            converted once (dtype, shape) at entry, a bad one is an `InputError` naming it.
        **named : the inputs as keyword arguments, when `inputs` is not given.

        Returns
        -------
        dict[str, np.ndarray]
            Each output by name: fresh arrays, never aliased by a later run.
        """
        if inputs is None:
            inputs = named
        m = self.method(method)
        with self._lock:
            if self._closed:
                raise QnnrtError("program is closed")
            try:
                plan = self._plan_of(m)
                if self.tracer is None:
                    out = plan.run(inputs)
                else:
                    with self.tracer.scope(f"run {m.name}", "run", {"iteration": self.iterations}):
                        out = plan.run(inputs)
                self.timing = plan.timing
                return out
            finally:
                self.iterations += 1

    def plan(self, method: str | int | None = None) -> Plan:
        """The plan `run` runs `method` with (built now, when it was not yet)."""
        m = self.method(method)
        with self._lock:
            return self._plan_of(m)

    def create_contexts(self, methods: Sequence[str | int | None]) -> list[str]:
        """Create now the contexts `methods` call, through the pool in their call order as a run
        would (the policy's bound holds), so a first call does not pay for them. Nothing under
        a policy that frees a context after each use (the first call would create it again).
        Returns the keys live afterwards."""
        with self._lock:
            if self._closed:
                raise QnnrtError("program is closed")
            order = [k for name in methods for k in self.method(name).graph_order]
            if self.pool.residency.free_after_use or not order:
                return []
            self.pool.set_order(order)
            for position, key in enumerate(order):
                if key not in order[:position]:
                    self.pool.acquire(key, position)
                    self.pool.release(key, position)
            return [k for k in dict.fromkeys(order) if k in self.pool.live_keys]

    def prepare(self, method: str | int | None, arrays: CallerArrays) -> PreparedMethod:
        """Bind `method` once to arrays the caller owns, for runs without per-call allocation.

        Parameters
        ----------
        method : the method's name or index; None: the only one.
        arrays : `CallerArrays` (runtime/plan.py): the input and output arrays by name, each
            exactly the dtype and shape the method declares, C-contiguous and writeable.

        Returns
        -------
        PreparedMethod
            Its `run()` reads the inputs and writes the outputs in place (through
            `run_prepared`). It has a plan of its own: the one `run` uses is untouched. Raises
            `NotPreparable` when the method cannot be bound (only compiled .pte methods can).
        """
        m = self.method(method)
        with self._lock:
            if self._closed:
                raise QnnrtError("program is closed")
            return PreparedMethod(self, m.prepare(self.context(self._timed), arrays))

    def run_prepared(self, prepared: PreparedRun) -> None:
        """One run of a prepared method, under the program's lock (as `run`).

        Parameters
        ----------
        prepared : what `prepare` bound (its `PreparedRun`), of this program.

        Returns
        -------
        None
            The outputs are in the caller's arrays; `timing` holds this run's figures.
        """
        with self._lock:
            if self._closed:
                raise QnnrtError("program is closed")
            try:
                if self.tracer is None:
                    prepared.run()
                else:
                    with self.tracer.scope("run (prepared)", "run", {"iteration": self.iterations}):
                        prepared.run()
                self.timing = prepared.timing
            finally:
                self.iterations += 1

    def _plan_of(self, m: Method) -> Plan:
        """The method's plan, built at its first run: the method's own (`Method.plan`), or the
        step-by-step reference path when `compiled` is False."""
        key = (m.name, self.compiled, self._timed)
        plan = self._plans.get(key)
        if plan is None or plan.method is not m:
            context = self.context(self._timed)
            plan = self._plans[key] = (m.plan(context) if self.compiled
                                       else ReferencePlan(context, m))
        return plan

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Free every context, then the backend; write the heap profile and the trace. Waits for a
        run in progress on another thread; idempotent; a later `run` is a `QnnrtError`.

        Returns
        -------
        None
        """
        with self._lock:  # waits for a run in progress on another thread
            if self._closed:
                return
            self._closed = True
            self._close_resources()

    def _close_resources(self) -> None:
        on_backend: list[Closable] = []
        if self.shared_memory is not None:
            on_backend.append(self.shared_memory)
        if self.observers is not None and self.observers.profile is not None:
            on_backend.append(self.observers.profile)
        close_all(Holdings(getattr(self, "pool", None), on_backend, list(self.binaries.values()),
                           self._owned, self.backend, self.heap,
                           self.tracer if self.options.write_trace else None))

    def __enter__(self) -> "Program":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Program({str(self.path)!r}, methods={list(self.methods)}, "
                f"contexts={len(self.binaries)}, residency={self.pool.residency})")


class PreparedMethod:
    """A method of a program bound to caller arrays (`Program.prepare`): `run()` runs it in place,
    under the program's lock, counted as an iteration, its timing in `program.timing`."""
    __slots__ = ("program", "prepared")

    def __init__(self, program: Program, prepared: PreparedRun) -> None:
        self.program, self.prepared = program, prepared

    def run(self) -> None:
        self.program.run_prepared(self.prepared)

    def graph_reads(self, name: str) -> list[np.ndarray]:
        return self.prepared.graph_reads(name)
