"""Program: methods over a set of context binaries, run with a residency policy.

`qnnrt.load(path)` accepts a program folder (program.json), an EPContext `.onnx`, a raw context
binary `.bin`, or an ExecuTorch `.pte` with QNN delegates.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from qnnrt._capi.library import open_library
from qnnrt.core import Backend, ContextBinary, Profile
from qnnrt.errors import FormatError, QnnrtError
from qnnrt.profiling.heap import HeapProfiler
from qnnrt.profiling.pd_log import pd_estimate_from_log
from qnnrt.runtime.method import GraphMethod, Method, OnnxMethod, QnnStep
from qnnrt.runtime.residency import ContextPool, Residency


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
                 profile_level: str = "off", progress=None):
        self.path = path
        self.backend = backend
        self.binaries = binaries
        self.heap = heap
        self.exec_profiler = exec_profiler
        self.profile_level = profile_level
        self._lock = threading.RLock()
        self._closed = False
        self._exec_profile: Profile | None = None
        self.iterations = 0
        try:
            self.methods: dict[str, Method] = method_builder(self)
            if not self.methods:
                raise FormatError(f"{path}: the program has no methods")
            profiler = (_CreateProfiles(backend, profile_level, exec_profiler.record)
                        if exec_profiler is not None and profile_level != "off" else None)
            self.pool = ContextPool(backend, binaries, residency, hooks=heap,
                                    pd_estimate=pd_estimate_from_log, profiler=profiler)
            t0 = time.perf_counter()
            if self.pool.residency.kind == "eager":
                self.pool.load_all(progress)
            self.load_seconds = time.perf_counter() - t0
        except BaseException:
            self.close()
            raise

    # -- running -----------------------------------------------------------------------------
    def method(self, name: str | int | None = None) -> Method:
        if name is None:
            if len(self.methods) == 1 or "forward" not in self.methods:
                return next(iter(self.methods.values()))
            return self.methods["forward"]
        if isinstance(name, int):
            names = list(self.methods)
            if not 0 <= name < len(names):
                raise QnnrtError(f"method index {name} out of range; the program has "
                                 f"{len(names)} method(s): {names}")
            return self.methods[names[name]]
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
            self.pool.set_order(m.graph_order)
            try:
                return m.run(inputs, self._run_graph)
            finally:
                self.iterations += 1

    def _run_graph(self, step: QnnStep, position: int, arrays: list[np.ndarray]) -> list:
        ctx = self.pool.acquire(step.key, position)
        try:
            g = ctx.graph(step.graph)
            prof = None
            if self.exec_profiler is not None and self.profile_level != "off":
                if self._exec_profile is None:
                    self._exec_profile = Profile(self.backend, self.profile_level)
                prof = self._exec_profile
            out = g.execute(arrays, profile=prof, dequantize=step.dequantize)
            if prof is not None:
                self.exec_profiler.record("execute", step.graph, step.key, prof.events(),
                                          iteration=self.iterations)
            return [out[s.name] for s in g.spec.outputs]
        finally:
            self.pool.release(step.key, position)

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
        for c in getattr(self, "_closers", []):
            c.close()
        self.backend.close()
        if self.heap is not None:
            self.heap.close()

    def __enter__(self) -> "Program":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Program({str(self.path)!r}, methods={list(self.methods)}, "
                f"contexts={len(self.binaries)}, residency={self.pool.residency})")


# ------------------------------------------------------------------------------------ loading
def _relkey(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _onnx_methods(models: dict[str, Path], root: Path, lib) -> tuple[dict, Callable]:
    """Binaries referenced by EPContext models, and a builder for their methods."""
    from qnnrt.formats.epcontext import read_epcontext_model
    binaries: dict[str, ContextBinary] = {}
    parsed = {name: read_epcontext_model(p, root=root) for name, p in models.items()}
    node_key: dict[tuple[str, int], str] = {}   # (method, node index) -> pool key
    for name, em in parsed.items():
        for n in em.epcontext_nodes:
            if n.binary_path is not None:
                key = _relkey(n.binary_path, root)
                if key not in binaries:
                    binaries[key] = ContextBinary(n.binary_path, name=key, lib=lib)
            elif n.embedded:
                key = f"{models[name].name}:{n.index}:{n.name}"
                binaries[key] = ContextBinary(buffer=n.embedded, name=key, lib=lib)
            else:
                continue
            node_key[(name, n.index)] = key
    by_graph: dict[str, str] = {}
    for key, b in binaries.items():
        for g in b.graphs:
            by_graph.setdefault(g.name, key)
    for name, em in parsed.items():  # non-main nodes: the context that holds their graph
        for n in em.epcontext_nodes:
            if (name, n.index) not in node_key:
                if n.graph_name not in by_graph:
                    raise FormatError(f"{models[name]}: EPContext node {n.name!r} names no context "
                                      f"binary and no other node's binary has graph "
                                      f"{n.graph_name!r}")
                node_key[(name, n.index)] = by_graph[n.graph_name]

    def build(program: Program) -> dict[str, Method]:
        return {name: OnnxMethod(name, em, binaries, lambda n, name=name: node_key[(name, n.index)])
                for name, em in parsed.items()}
    return binaries, build


def load(path: str | os.PathLike, residency: "str | Residency" = "auto", soc=None,
         backend_lib: str | None = None, log_level: str = "warn", graph: str | None = None,
         heap_profiling_path: str | None = None, profile_level: str = "off",
         exec_profiler=None, progress=None) -> Program:
    """Open a program folder, an EPContext .onnx, a context binary .bin or an ExecuTorch .pte.

    Files are read and checked before QNN is initialised; `soc` defaults to the SoC the artifact
    was built for."""
    p = Path(path)
    if not p.exists():
        raise FormatError(f"{p}: no such file or folder")
    if profile_level not in ("off", "basic", "detailed"):
        raise QnnrtError(f"unknown profile level {profile_level!r}; use off, basic or detailed")
    residency = Residency.parse(residency)
    lib = open_library(backend_lib)
    # the heap profiler exists first: whatever fails later, its file is written (zero contexts)
    heap = HeapProfiler(path=heap_profiling_path) if heap_profiling_path else None
    binaries: dict[str, ContextBinary] = {}
    closers: list = []
    backend = None
    try:
        binaries, build, built_for = _open_source(p, lib, graph, closers)
        if soc is None:
            soc = built_for or _soc_of(binaries)
        backend = Backend(backend_lib=backend_lib, soc=soc, log_level=log_level)
        prog = Program(p, binaries, build, backend, residency, heap=heap,
                       exec_profiler=exec_profiler, profile_level=profile_level,
                       progress=progress)
        prog._closers = closers
        return prog
    except BaseException:
        if heap is not None:
            try:
                heap.close()  # a failed load still leaves its heap file (both checkpoints)
            except Exception:
                pass
        for b in binaries.values():
            b.close()
        for c in closers:
            c.close()
        if backend is not None:
            backend.close()
        raise


def _open_source(p: Path, lib, graph: str | None, closers: list):
    """(binaries by pool key, method builder, SoC the artifact was built for) of a program folder,
    EPContext model, .pte or .bin; objects to close after the binaries go to `closers`."""
    if p.is_dir():
        from qnnrt.formats.program import read_program
        manifest = read_program(p)
        models = {m.name: p / m.model for m in manifest.methods}
        return (*_onnx_methods(models, p, lib), manifest.target.get("soc_model"))
    if p.suffix == ".onnx":
        return (*_onnx_methods({p.stem: p}, p.parent, lib), None)
    if p.suffix == ".pte":
        from qnnrt.executorch.program import pte_methods
        binaries, build, built_for, pte = pte_methods(p, lib)
        closers.append(pte)
        return binaries, build, built_for
    key = p.name
    binaries = {key: ContextBinary(p, name=key, lib=lib)}
    specs = [binaries[key].graph(graph)] if graph is not None else binaries[key].graphs

    def build(program: Program) -> dict[str, Method]:
        return {s.name: GraphMethod(key, s) for s in specs}
    return binaries, build, None


def _soc_of(binaries: dict[str, ContextBinary]):
    """The SoC model the first binary was compiled for (0 / unknown -> None: no device config)."""
    for b in binaries.values():
        return b.info.soc_model or None
    return None
