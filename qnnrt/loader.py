"""`qnnrt.load`: open what users bring (program folder, EPContext .onnx, context binary .bin,
ExecuTorch .pte) and hand the runtime a Program. It sits above runtime/ and executorch/ because it
chooses between them; files are read and checked before QNN is initialised."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from qnnrt.core import Backend, ContextBinary, open_library
from qnnrt.core.profile import PROFILE_LEVELS
from qnnrt.errors import FormatError, QnnrtError
from qnnrt.profiling.heap import HeapProfiler
from qnnrt.runtime.method import GraphMethod, Method, OnnxMethod
from qnnrt.runtime.program import Program
from qnnrt.runtime.residency import Residency


@dataclass
class LoadOptions:
    """How `qnnrt.load` opens a program (everything but the residency, the SoC and the library).

    log_level: QNN's log level (error, warn, info, verbose, debug).
    graph: for a .bin with several graphs, run only this one.
    heap_profiling_path: write the heap profile (two lines + JSON timeline) here at close.
    profile_level: QNN execution profiling: off, basic or detailed.
    exec_profiler: an `ExecutionProfiler` receiving the profile events (with profile_level).
    progress: called as progress(done, total) while an eager load creates contexts.
    vet: check binaries qnnrt did not write (raw .bin, foreign EPContext, .pte delegates) in a
        short-lived child process before this process hands them to QNN (verdict cached by content
        hash); binaries of qnnrt programs are checked against the manifest's sha256 instead.
        "create" vets binary info and context creation only, without running each graph once.
    """
    log_level: str = "warn"
    graph: str | None = None
    heap_profiling_path: str | None = None
    profile_level: str = "off"
    exec_profiler: Any = None
    progress: Callable[[int, int], None] | None = None
    vet: bool | str = True


def load(path: str | os.PathLike, *, residency: str | Residency = "auto", soc: str | int | None = None,
         backend_lib: str | os.PathLike | None = None, options: LoadOptions | None = None) -> Program:
    """Open a program folder, an EPContext .onnx, a context binary .bin or an ExecuTorch .pte.

    `soc` defaults to the SoC the artifact was built for; `backend_lib` names libQnnHtp (a file or
    its folder) instead of discovery; `residency` is auto, eager, lazy, sequential, bounded:K or
    bounded:<size>."""
    opts = options or LoadOptions()
    p = Path(path)
    if "\0" in os.fspath(p):
        raise FormatError(f"{os.fspath(p)!r}: the path contains a NUL byte; pass a real file or folder")
    try:
        exists = p.exists()
    except (OSError, ValueError) as e:
        raise FormatError(f"{p}: cannot open ({e})") from None
    if not exists:
        raise FormatError(f"{p}: no such file or folder")
    if opts.profile_level not in PROFILE_LEVELS:
        raise QnnrtError(f"unknown profile level {opts.profile_level!r}; use {', '.join(PROFILE_LEVELS)}")
    policy = Residency.parse(residency)
    lib_path = os.fspath(backend_lib) if backend_lib is not None else None
    lib = open_library(lib_path)
    # the heap profiler exists first: whatever fails later, its file is written (zero contexts)
    heap = HeapProfiler(path=opts.heap_profiling_path) if opts.heap_profiling_path else None
    binaries: dict[str, ContextBinary] = {}
    owned: list = []
    backend = None
    vet_reports: list = []

    def vet(bins: dict[str, ContextBinary], built_for=None) -> None:
        if opts.vet and bins:
            from qnnrt.core.vet import vet_binaries
            vet_reports.append(vet_binaries(bins, backend_lib=lib_path, soc=soc or built_for,
                                            execute=opts.vet != "create"))
    try:
        binaries, build, built_for = _open_source(p, lib, opts.graph, owned, vet)
        if soc is None:
            soc = built_for or _soc_of(binaries)
        backend = Backend(backend_lib=lib_path, soc=soc, log_level=opts.log_level)
        program = Program(p, binaries, build, backend, policy, heap=heap,
                          exec_profiler=opts.exec_profiler, profile_level=opts.profile_level,
                          progress=opts.progress, owned=owned)
        program.vet_reports = vet_reports
        return program
    except BaseException:
        if heap is not None:
            try:
                heap.close()  # a failed load still leaves its heap file (both checkpoints)
            except QnnrtError:
                pass
        for b in binaries.values():
            b.close()
        for c in owned:
            c.close()
        if backend is not None:
            backend.close()
        raise


def _relkey(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _check_sha256(b: ContextBinary, expected: str, manifest: Path) -> None:
    from qnnrt.fileio import buffer_sha256
    got = buffer_sha256(b.buffer)
    if got != expected:
        raise FormatError(f"{b.where}: sha256 {got[:16]}... differs from the {expected[:16]}... "
                          f"{manifest} records; the binary was corrupted or replaced after the "
                          f"build. It was not handed to QNN. Copy it again or rebuild the program.")


def _onnx_methods(models: dict[str, Path], root: Path, lib, vet: Callable, owned: list,
                  sha256: dict[str, str] | None = None, manifest: Path | None = None,
                  built_for=None) -> tuple[dict, Callable]:
    """Binaries referenced by EPContext models, and a builder for their methods. Binaries with a
    recorded sha256 (qnnrt programs) are checked against it; the others go through `vet`, both
    before QNN reads any of them."""
    binaries: dict[str, ContextBinary] = {}
    n_owned = len(owned)
    result = _onnx_methods_inner(models, root, lib, vet, binaries, sha256, manifest, built_for, owned)
    del owned[n_owned:]  # the Program owns the binaries now; on failure load() closes them from owned
    return result


def _onnx_methods_inner(models, root, lib, vet, binaries, sha256, manifest, built_for, owned):
    from qnnrt.formats.epcontext import read_epcontext_model
    parsed = {name: read_epcontext_model(p, root=root) for name, p in models.items()}
    node_key: dict[tuple[str, int], str] = {}   # (method, node index) -> pool key
    for name, em in parsed.items():
        for n in em.epcontext_nodes:
            if n.binary_path is not None:
                key = _relkey(n.binary_path, root)
                if key not in binaries:
                    binaries[key] = ContextBinary(n.binary_path, name=key, lib=lib)
                    owned.append(binaries[key])
            elif n.embedded:
                key = f"{models[name].name}:{n.index}:{n.name}"
                binaries[key] = ContextBinary(buffer=n.embedded, name=key, lib=lib)
                owned.append(binaries[key])
            else:
                continue
            node_key[(name, n.index)] = key
    sha256 = sha256 or {}
    unvetted: dict[str, ContextBinary] = {}
    for key, b in binaries.items():
        if key in sha256:
            _check_sha256(b, sha256[key], manifest or root)
        else:
            unvetted[key] = b
    vet(unvetted, built_for)
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


def _open_source(p: Path, lib, graph: str | None, owned: list, vet: Callable):
    """(binaries by pool key, method builder, SoC the artifact was built for) of a program folder,
    EPContext model, .pte or .bin; objects to close after the binaries go to `owned`. Every binary
    is hash-checked or vetted (`vet`) before QNN reads it."""
    if p.is_dir():
        from qnnrt.formats.program import read_program
        manifest = read_program(p)
        models = {m.name: p / m.model for m in manifest.methods}
        sha = {c.path: c.sha256 for c in manifest.contexts if c.sha256}
        soc = manifest.target.get("soc_model")
        return (*_onnx_methods(models, p, lib, vet, owned, sha, manifest.manifest_path, soc), soc)
    if p.suffix == ".onnx":
        return (*_onnx_methods({p.stem: p}, p.parent, lib, vet, owned), None)
    if p.suffix == ".pte":
        from qnnrt.executorch.program import pte_methods
        binaries, build, built_for, pte = pte_methods(p, lib)
        owned.extend(binaries.values())  # closed before the .pte mapping if vetting refuses one
        owned.append(pte)
        vet(binaries, built_for)
        del owned[-1 - len(binaries):-1]
        return binaries, build, built_for
    key = p.name
    binaries = {key: ContextBinary(p, name=key, lib=lib)}
    owned.extend(binaries.values())  # closed if vetting refuses it
    vet(binaries)
    owned.clear()
    specs = [binaries[key].graph(graph)] if graph is not None else binaries[key].graphs

    def build(program: Program) -> dict[str, Method]:
        return {s.name: GraphMethod(key, s) for s in specs}
    return binaries, build, None


def _soc_of(binaries: dict[str, ContextBinary]):
    """The SoC model the first binary was compiled for (0 / unknown -> None: no device config)."""
    for b in binaries.values():
        return b.info.soc_model or None
    return None
