"""Program: methods over a set of context binaries, run with a residency policy.

`qnnrt.load` (qnnrt/loader.py) opens the sources and hands a Program its binaries and methods."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from qnnrt.core import Backend, ContextBinary, Profile
from qnnrt.core.graph import BoundCall
from qnnrt.errors import FormatError, QnnError, QnnrtError
from qnnrt.profiling.pd_log import pd_estimate_from_log
from qnnrt.runtime.method import GraphMethod, Method, OnnxMethod, QnnStep, UnavailableMethod
from qnnrt.runtime.plan import DelegatePlan, MethodPlan, RunTiming
from qnnrt.runtime.pd_budget import backend_identity, remember_budget, resolve_budget
from qnnrt.runtime.pd_fleet import MultiPdPool, RemoteCall
from qnnrt.runtime.pd_plan import DEFAULT_MAX_PDS, Placement, first_use_order, place
from qnnrt.runtime.recovery import DEFAULT_MAX_RECOVERIES, Recovery
from qnnrt.runtime.residency import ContextPool, Residency
from qnnrt.runtime.vet import StepWatch, VetReport


def predicted_needs(binaries: dict[str, ContextBinary]) -> dict[str, int | None]:
    """Each context's predicted PD need in bytes (None where the binary does not tell)."""
    out: dict[str, int | None] = {}
    for key, b in binaries.items():
        try:
            out[key] = b.pd_need().total
        except (FormatError, OSError):
            out[key] = None
    return out


def choose_placement(methods: dict[str, Method], binaries: dict[str, ContextBinary], policy: Residency,
                     needs: dict[str, int | None], budget, max_pds: int) -> Placement | None:
    """Multi-PD placement: forced by `multi-pd[:N]`; chosen by `auto` when the contexts do not fit
    one PD and fit at most `max_pds`; else None (one PD, in this process)."""
    if policy.kind not in ("auto", "multi-pd"):
        return None
    orders = {n: list(m.graph_order) for n, m in methods.items()
              if not isinstance(m, UnavailableMethod)}
    order = first_use_order(orders, list(binaries))
    if policy.kind == "multi-pd":
        if budget is None:
            raise QnnrtError("multi-pd residency needs this backend's PD budget, which is not known "
                             "yet: give it with --pd-budget (or LoadOptions(pd_budget=...)), or run "
                             "once with --residency auto to learn it")
        return place(order, needs, budget.bytes, max(max_pds, policy.pds or 0), policy.pds,
                     budget.source)
    if (budget is None or max_pds < 2 or None in needs.values()
            or sum(v for v in needs.values() if v) <= budget.bytes):
        return None
    try:  # more PDs than allowed: max_pds PDs, each evicting what it cannot hold
        return place(order, needs, budget.bytes, max_pds, None, budget.source, evict=True)
    except QnnrtError:  # e.g. a context alone over the budget: one PD, which says so
        return None


class _CreateProfiles:
    """Hands a fresh QNN profile to each context creation and passes its events on."""

    def __init__(self, backend: Backend, level: str, sink: Callable):
        self.backend, self.level, self.sink = backend, level, sink

    def context_profile(self) -> Profile:
        return Profile(self.backend, self.level)

    def created(self, key: str, events: list[dict]) -> None:
        self.sink("context_create", None, key, events)


class Program:
    """Methods sharing a pool of contexts. Use as a context manager, or call close()."""

    def __init__(self, path: Path, binaries: dict[str, ContextBinary],
                 method_builder: Callable[["Program"], dict[str, Method]], backend: Backend,
                 residency: "str | Residency" = "auto", heap=None, exec_profiler=None,
                 profile_level: str = "off", progress=None, owned: list | None = None,
                 constants: dict | None = None, pd_budget: int | None = None,
                 watch: StepWatch | None = None, max_pds: int = DEFAULT_MAX_PDS,
                 log_level: str = "warn", max_recoveries: int = DEFAULT_MAX_RECOVERIES):
        self.path = path
        self.constants: dict = dict(constants or {})  # constant methods' values (.pte metadata)
        self.backend = backend
        self.binaries = binaries
        self.heap = heap
        self.exec_profiler = exec_profiler
        self.profile_level = profile_level
        self._lock = threading.RLock()
        self._closed = False
        self._exec_profile: Profile | None = None
        self._owned = list(owned or [])   # closed after the binaries (e.g. the mapped .pte file)
        self.iterations = 0
        self.pd_budget_cache: str | None = None
        self.graph_calls = 0
        self.vet_reports: list[VetReport] = []  # set by qnnrt.load: what was vetted
        self.timing = RunTiming()  # the last run: time inside graphExecute and in CPU ops
        self._plans: dict[str, MethodPlan | DelegatePlan | None] = {}
        self.compiled = True  # False: run every method on the step-by-step reference path
        try:
            self.methods: dict[str, Method] = method_builder(self)
            if not self.methods and not self.constants:
                raise FormatError(f"{path}: the program has no methods")
            blocked = [m for m in self.methods.values() if isinstance(m, UnavailableMethod)]
            if self.methods and len(blocked) == len(self.methods):  # nothing could ever run
                raise FormatError(blocked[0].reason)
            profiler = (_CreateProfiles(backend, profile_level, exec_profiler.record)
                        if exec_profiler is not None and profile_level != "off" else None)
            self.pd_identity = backend_identity(backend.lib, backend.soc_model)
            budget = resolve_budget(self.pd_identity, pd_budget)
            needs = predicted_needs(binaries)
            self.placement = choose_placement(self.methods, binaries, Residency.parse(residency), needs,
                                              resolve_budget(self.pd_identity, pd_budget, True),
                                              max_pds)
            self.pool: ContextPool | MultiPdPool
            if self.placement is not None:
                self.pool = MultiPdPool(backend, binaries, self.placement, Residency.parse(residency),
                                        log_level=log_level, progress=progress, heap=heap)
            else:
                self.pool = ContextPool(backend, binaries, residency, hooks=heap,
                                        pd_estimate=pd_estimate_from_log, profiler=profiler,
                                        predictions=needs,
                                        budget_bytes=budget.bytes if budget else None,
                                        budget_source=budget.source if budget else None,
                                        on_capacity=self._learned, watch=watch)
            # multi-PD pools run graphs in worker processes: recovery there is not built yet
            self.recovery = Recovery(self.pool if isinstance(self.pool, ContextPool) else None,
                                     max_recoveries, lambda: self.iterations)
            t0 = time.perf_counter()
            if self.pool.residency.kind == "eager":
                self.pool.load_all(progress)
            self.load_seconds = time.perf_counter() - t0
        except BaseException:
            self.close()
            raise

    def bound_call(self, key: str, spec) -> BoundCall | RemoteCall:
        """The call object a plan binds a graph of context `key` through: in this process, or in
        the PD worker that holds the context (the same calling shape)."""
        if isinstance(self.pool, MultiPdPool):
            return self.pool.bound_call(key, spec)
        return BoundCall(self.backend, spec)

    def buffer(self, shape: tuple, dtype) -> np.ndarray:
        """A zeroed array for a plan's intermediate: in the shared arena under multi-PD (graph calls
        in the workers read and write it in place), else an ordinary one."""
        if isinstance(self.pool, MultiPdPool):
            return self.pool.buffer(shape, dtype)
        return np.zeros(shape, dtype)

    def _learned(self, capacity: int) -> None:
        """A run found this backend's PD capacity: remember it for the next runs."""
        self.pd_budget_cache = remember_budget(self.pd_identity, capacity)

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

    def run(self, method: str | int | None = None, inputs=None, **named) -> dict[str, np.ndarray]:
        """Run a method: inputs as a dict by name, a sequence in order, or keyword arguments."""
        if inputs is None:
            inputs = named
        m = self.method(method)
        with self._lock:
            if self._closed:
                raise QnnrtError("program is closed")
            try:
                plan = self._plan(m)
                if plan is not None:
                    out = plan.run(inputs)
                    self.timing = plan.timing
                    return out
                self.timing = RunTiming()
                self.pool.set_order(m.graph_order)
                out = m.run(inputs, self._run_graph)
                self.timing.graph_calls = len(m.graph_order)
                return out
            finally:
                self.iterations += 1

    def _plan(self, m: Method) -> MethodPlan | DelegatePlan | None:
        """The method's compiled plan (built at its first run), or None for the reference path:
        profiling on, or a method kind the planner does not compile."""
        if not self.compiled or (self.exec_profiler is not None and self.profile_level != "off"):
            return None
        if m.name not in self._plans:
            compile_plan = getattr(m, "compile_plan", None)  # a method kind with its own planner
            self._plans[m.name] = (compile_plan(self) if compile_plan is not None
                                   else MethodPlan(self, m) if type(m) in (OnnxMethod, GraphMethod)
                                   else None)
        plan = self._plans[m.name]
        return plan if plan is not None and plan.method is m else None

    def _run_graph(self, step: QnnStep, position: int, arrays: list[np.ndarray]) -> list:
        self.graph_calls += 1  # read by progress reporters on other threads
        ctx = self.pool.acquire(step.key, position)
        try:
            try:
                return self._execute(ctx, step, arrays)
            except QnnError as e:
                return self.recovery.rerun(step.key, step.graph, e,
                                           lambda c: self._execute(c, step, arrays))
        finally:
            self.pool.release(step.key, position)

    def _execute(self, ctx, step: QnnStep, arrays: list[np.ndarray]) -> list:
        """The reference path's graph call on live context `ctx` (profiled when asked)."""
        g = ctx.graph(step.graph)
        prof = None
        if self.exec_profiler is not None and self.profile_level != "off":
            if self._exec_profile is None or self._exec_profile.closed:  # a backend restart closes it
                self._exec_profile = Profile(self.backend, self.profile_level)
            prof = self._exec_profile
        if all(a.dtype == t.dtype and a.shape == t.shape and a.flags.c_contiguous
               for a, t in zip(arrays, g.spec.inputs)):  # validated at method entry
            out = g.execute_prepared(arrays, profile=prof, dequantize=step.dequantize)
        else:  # an intermediate from a CPU op of another dtype / layout: convert and check
            out = g.execute(arrays, profile=prof, dequantize=step.dequantize)
        self.timing.accelerator_s += g.last_execute_seconds
        if prof is not None:
            self.exec_profiler.record("execute", step.graph, step.key, prof.events(),
                                      iteration=self.iterations)
        return [out[s.name] for s in g.spec.outputs]

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Free every context, then the backend; write the heap profile. Idempotent."""
        with self._lock:  # waits for a run in progress on another thread
            if self._closed:
                return
            self._closed = True
            self._close_resources()

    def _close_resources(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.close()
        if self._exec_profile is not None:
            self._exec_profile.close()
        for b in self.binaries.values():
            b.close()
        for c in self._owned:
            c.close()
        self.backend.close()
        if self.heap is not None:
            self.heap.mark("backend_freed")  # QNN returns per-backend host memory only here
            self.heap.close()

    def __enter__(self) -> "Program":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Program({str(self.path)!r}, methods={list(self.methods)}, "
                f"contexts={len(self.binaries)}, residency={self.pool.residency})")
