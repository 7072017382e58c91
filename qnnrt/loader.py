"""`qnnrt.load`: open what users bring (program folder, EPContext .onnx, context binary .bin,
ExecuTorch .pte) and hand the runtime a Program. It sits above runtime/ and executorch/ because it
chooses between them; files are read and checked before QNN is initialised."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

from qnnrt.core import Backend, ContextBinary, LogLevel, LogLevelName, QnnLibrary, open_library
from qnnrt.core.profile import PROFILE_LEVELS
from qnnrt.errors import FormatError, QnnrtError
from qnnrt.formats.genie import GenieConfig, is_genie_bundle, read_genie_config
from qnnrt.units import parse_size
from qnnrt.profiling.heap import HeapProfiler
from qnnrt.profiling.trace import Tracer
from qnnrt.runtime.residency.budget import DEFAULT_MAX_PDS
from qnnrt.runtime.method import GraphMethod, Method, MethodBuilder, OnnxMethod
from qnnrt.runtime.performance import Choice, Performance, check_mode, choose, describe_optimizations
from qnnrt.runtime.program import Program, ProgramOptions
from qnnrt.runtime.hooks import ExecutionRecorder
from qnnrt.runtime.recovery import DEFAULT_MAX_RECOVERIES
from qnnrt.runtime.residency import Residency
from qnnrt.runtime.vet.policy import VetMode, VetReport, vet_binaries, vet_mode
from qnnrt.runtime.vet.watch import StepWatch, watch_binaries
from qnnrt.soc import parse_soc


ProfileLevelName = Literal["off", "basic", "detailed"]

if TYPE_CHECKING:
    from qnnrt.formats.program import ProgramManifest

logger = logging.getLogger("qnnrt.loader")


@dataclass(frozen=True)
class LoadOptions:
    """How `qnnrt.load` opens a program; validated when made (a bad value is a QnnrtError here,
    not a surprise at load). Immutable: derive variants with `dataclasses.replace`.

    Parameters
    ----------
    residency: auto, eager, lazy, sequential, bounded:K or bounded:<size> (or a `Residency`).
    soc: the SoC (model number or name) instead of the one the artifact was built for.
    backend_lib: libQnnHtp (a file or its folder) instead of discovery.
    log_level: QNN's log level (error, warn, info, verbose, debug).
    graph: for a .bin with several graphs, run only this one.
    heap_profiling_path: write the heap profile (two lines + JSON timeline) here at close.
    profile_level: QNN execution profiling: off, basic or detailed.
    exec_profiler: an `ExecutionProfiler` receiving the profile events (with profile_level).
    progress: called as progress(done, total) while an eager load creates contexts.
    pd_budget: the PD budget `auto` plans with (bytes or e.g. "3.4GiB"), instead of the one learned
        for this backend (user cache) or found by failing.
    vet: how binaries qnnrt did not write (raw .bin, foreign EPContext, .pte delegates) are checked
        before this process hands them to QNN (runtime/vet/policy.py); binaries of qnnrt programs are
        checked against the manifest's sha256 instead. True / "auto": binary info and context
        creation in a short-lived child process, plus one run on zeros of the graphs that are cheap
        to run; "execute": every graph runs once there; "create": no graph runs; "worker": no child,
        this process is a disposable worker whose parent reports a crash (the CLI's); False: none.
        Verdicts are cached by content hash.
    vet_progress: called as vet_progress(done, total) as the vetting child finishes binaries.
    max_pds: `auto` spreads a program whose contexts do not fit one PD over at most this many PD
        worker processes, every context resident (runtime/hosts/pd/fleet.py); beyond it, each PD evicts;
        1: one PD that evicts. `multi-pd:N` forces N.
    performance_mode: the HTP performance vote (burst, balanced, ..., default = no vote); None
        honours the file's choice (a .pte's compile spec, program.json), else
        `performance_mode_default` (qnnrt llm: burst), else no vote.
    rpc_control_latency_us / rpc_polling_time_us: instead of the mode's RPC settings.
    shared_buffer: graph I/O in registered rpcmem (None: as the file asks); off where the backend
        cannot (the simulator), which the program's `performance` section says.
    max_recoveries: how many graph calls failing with an error a device raises transiently (1100,
        1007, 1011) the program recovers in all, by re-creating their contexts (or backend) and
        calling again (runtime/recovery.py); 0 turns recovery off.
    trace: a Chrome trace-event file of the run (Perfetto UI, chrome://tracing), written when the
        program closes: context creations / frees / evictions, graph calls, CPU steps, runs and
        recoveries on one track per process (this one and each PD worker), live-context, PD and
        (with heap_profiling_path) heap counters, QNN's per-op events at profile_level "detailed".
        A path; or a `profiling.trace.Tracer` several programs (and the LLM runner) share, which its
        owner writes (`Tracer.write`), e.g. with another cap than DEFAULT_MAX_EVENTS.

    Returns
    -------
    LoadOptions
        Frozen; give it to `qnnrt.load(path, options=...)`.
    """
    residency: Residency | str = "auto"
    soc: str | int | None = None
    backend_lib: str | os.PathLike[str] | None = None
    log_level: LogLevelName | LogLevel = "warn"
    graph: str | None = None
    heap_profiling_path: str | None = None
    profile_level: ProfileLevelName = "off"
    exec_profiler: ExecutionRecorder | None = None
    progress: Callable[[int, int], None] | None = None
    pd_budget: int | str | None = None
    vet: bool | VetMode = True
    vet_progress: Callable[[int, int], None] | None = None
    max_pds: int = DEFAULT_MAX_PDS
    performance_mode: str | None = None
    performance_mode_default: str | None = None
    rpc_control_latency_us: int | None = None
    rpc_polling_time_us: int | None = None
    shared_buffer: bool | None = None
    max_recoveries: int = DEFAULT_MAX_RECOVERIES
    trace: str | os.PathLike[str] | Tracer | None = None

    def __post_init__(self) -> None:
        LogLevel.parse(self.log_level)
        if self.profile_level not in PROFILE_LEVELS:
            raise QnnrtError(f"unknown profile level {self.profile_level!r}; use {', '.join(PROFILE_LEVELS)}")
        vet_mode(self.vet)  # an unknown mode is an error here
        choose(self.performance_mode, None, self.performance_mode_default,
               self.rpc_control_latency_us, self.rpc_polling_time_us)   # checks modes and RPC values
        object.__setattr__(self, "residency", Residency.parse(self.residency))
        object.__setattr__(self, "soc", parse_soc(self.soc))
        if self.pd_budget is not None:
            object.__setattr__(self, "pd_budget", parse_size(self.pd_budget, "PD budget"))
        if self.max_recoveries < 0:
            raise QnnrtError(f"max_recoveries {self.max_recoveries}: give 0 (no recovery) or more")

    @property
    def policy(self) -> Residency:
        """The residency, parsed."""
        return Residency.parse(self.residency)


@dataclass
class Source:
    """What `_open_source` found: the method builder, the SoC the artifact was built for, the
    constant methods' values, and the binaries already proven (sha256 from the manifest)."""
    build: MethodBuilder
    built_for: Any = None
    constants: dict = field(default_factory=dict)
    trusted: set = field(default_factory=set)
    runtime: dict = field(default_factory=dict)   # what the file asks of the runtime (performance_mode, ...)
    genie: GenieConfig | None = None             # a Genie bundle's config


def load(path: str | os.PathLike[str], *, residency: str | Residency | None = None,
         soc: str | int | None = None, backend_lib: str | os.PathLike[str] | None = None,
         options: LoadOptions | None = None) -> Program:
    """Open a program folder, an EPContext .onnx, a context binary .bin or an ExecuTorch .pte.

    Parameters
    ----------
    path : the artifact: a folder with program.json, an EPContext .onnx, a .bin, a .pte, or a
        Genie bundle folder.
    residency : shortcut for `LoadOptions.residency`: auto (the default), eager, lazy,
        sequential, bounded:K, bounded:<size> or multi-pd[:N]; given, it wins over `options`'.
    soc : shortcut for `LoadOptions.soc` (default: the SoC the artifact was built for).
    backend_lib : shortcut for `LoadOptions.backend_lib`: libQnnHtp (a file or its folder)
        instead of discovery.
    options : everything else about the load (`LoadOptions`; default: its defaults).

    Returns
    -------
    Program
        The loaded program (a context manager: `close` frees its contexts and backend). A bad
        artifact or option is a `QnnrtError` saying what, where and what to do; whatever was
        opened before it is freed.
    """
    opts = _with_shortcuts(options or LoadOptions(), residency=residency, soc=soc, backend_lib=backend_lib)
    p = _existing_path(path)
    policy = opts.policy
    soc = opts.soc
    lib_path = os.fspath(opts.backend_lib) if opts.backend_lib is not None else None
    lib = open_library(lib_path)
    binaries: dict[str, ContextBinary] = {}   # filled as opened: closed here if anything fails
    owned: list = []
    with contextlib.ExitStack() as undo:  # a failure closes what was opened, newest first
        # the heap profiler exists first: whatever fails later, its file is written (zero contexts)
        heap = HeapProfiler(path=opts.heap_profiling_path) if opts.heap_profiling_path else None
        if heap is not None:
            undo.callback(_close_heap, heap)
        tracer = opts.trace if isinstance(opts.trace, Tracer) or opts.trace is None else Tracer(opts.trace)
        if tracer is not None and tracer is not opts.trace:
            undo.callback(_close_trace, tracer)   # a failed load's trace is written too
        undo.callback(_close_opened, binaries, owned)
        src = _open_source(p, lib, opts.graph, binaries, owned)
        untrusted = {k: b for k, b in binaries.items() if k not in src.trusted}
        vet_reports, watch = _vet(untrusted, opts, lib_path, soc or src.built_for)
        from qnnrt.core.context import refuse_weight_sharing
        for b in binaries.values():  # before QNN creates one: the simulator crashes on these
            refuse_weight_sharing(b)
        if soc is None:
            soc = src.built_for or _soc_of(binaries)
        choice = _performance_choice(opts, src.runtime)
        pd_session = src.runtime.get("pd_session", "unsigned")   # as ExecuTorch's HtpDevice does
        signed_pd = "signed" in (pd_session if isinstance(pd_session, list) else [pd_session])
        backend = Backend(backend_lib=lib_path, soc=soc, log_level=opts.log_level, signed_pd=signed_pd)
        undo.callback(backend.close)
        performance = Performance(choice, backend)   # votes now, as ExecuTorch does at device creation
        group = describe_optimizations(performance, src.runtime, opts.shared_buffer, backend)
        if performance.shared_memory is not None:   # the program closes it; a failed load here
            undo.callback(performance.shared_memory.close)
        program = Program(p, binaries, src.build, backend, ProgramOptions(
            policy, heap=heap, exec_profiler=opts.exec_profiler, profile_level=opts.profile_level,
            progress=opts.progress, pd_budget=None if opts.pd_budget is None else int(opts.pd_budget),
            watch=watch, max_pds=opts.max_pds, log_level=LogLevel.parse(opts.log_level).name.lower(),
            spill_fill_group=group, max_recoveries=opts.max_recoveries, performance=performance,
            tracer=tracer, write_trace=tracer is not None and tracer is not opts.trace,
            vet_reports=tuple(vet_reports), genie=src.genie),
            owned=owned, constants=src.constants)
        undo.pop_all()  # the program owns them now
    return program


def _close_heap(heap: HeapProfiler) -> None:
    """A failed load still leaves its heap file (both checkpoints); failing to write it must not
    hide the error that stopped the load."""
    try:
        heap.close()
    except QnnrtError as e:
        logger.warning("the heap profile of the failed load was not written: %s", e)


def _close_trace(tracer: Tracer) -> None:
    try:
        tracer.close()
    except QnnrtError as e:
        logger.warning("the trace of the failed load was not written: %s", e)


def _with_shortcuts(opts: LoadOptions, residency: str | Residency | None, soc: str | int | None,
                    backend_lib: str | os.PathLike[str] | None) -> LoadOptions:
    """`opts` with the keyword shortcuts of `load` that were given (not None) in place."""
    if residency is not None:
        opts = dataclasses.replace(opts, residency=residency)
    if soc is not None:
        opts = dataclasses.replace(opts, soc=soc)
    if backend_lib is not None:
        opts = dataclasses.replace(opts, backend_lib=backend_lib)
    return opts


def _vet(untrusted: dict[str, ContextBinary], opts: LoadOptions, lib_path: str | None,
         soc) -> tuple[list[VetReport], StepWatch | None]:
    """Vet the binaries qnnrt did not write, as `opts.vet` says (before QNN reads them here)."""
    mode = vet_mode(opts.vet)
    if mode is None or not untrusted:
        return [], None
    watch = StepWatch.from_env() if mode == "worker" else None
    if watch is not None:
        return [watch_binaries(untrusted, watch)], watch
    return [vet_binaries(untrusted, mode="auto" if mode == "worker" else mode, backend_lib=lib_path,
                         soc=soc, progress=opts.vet_progress)], None


def _performance_choice(opts: LoadOptions, runtime: dict) -> Choice:
    """The vote: the option, else the file's (the first delegate's where delegates disagree)."""
    from_file = runtime.get("performance_mode")
    if isinstance(from_file, list):
        from_file = from_file[0]
    if from_file is not None:
        from_file = check_mode(from_file, f"performance mode recorded in {runtime.get('where', 'the file')}")
    return choose(opts.performance_mode, from_file, opts.performance_mode_default,
                  opts.rpc_control_latency_us, opts.rpc_polling_time_us)


def _close_opened(binaries: dict[str, ContextBinary], owned: list) -> None:
    """Undo a failed open: the binaries first, then what they point into (e.g. the mapped .pte)."""
    for b in binaries.values():
        b.close()
    for c in owned:
        c.close()


def _existing_path(path: str | os.PathLike) -> Path:
    if "\0" in os.fspath(path):
        raise FormatError(f"{os.fspath(path)!r}: the path contains a NUL byte; pass a real file or folder")
    p = Path(path)
    try:
        exists = p.exists()
    except (OSError, ValueError) as e:
        raise FormatError(f"{p}: cannot open ({e})") from None
    if not exists:
        raise FormatError(f"{p}: no such file or folder")
    return p


def _check_sha256(b: ContextBinary, expected: str, manifest: Path) -> None:
    got = b.sha256()
    if got != expected:
        got = b.sha256(fresh=True)     # the load cache may hold a wrong value: the bytes decide (and heal it)
    if got != expected:
        raise FormatError(f"{b.where}: sha256 {got[:16]}... differs from the {expected[:16]}... "
                          f"{manifest} records; the binary was corrupted or replaced after the "
                          f"build. It was not handed to QNN. Copy it again or rebuild the program.")


def _relkey(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _check_against_manifest(manifest: ProgramManifest, models: dict[str, Path], parsed: dict) -> None:
    """A program's methods may only name binaries (and graphs) its program.json lists: the
    manifest's size and graph checks must never be skipped by a node pointing elsewhere."""
    listed = {c.file.resolve(): c for c in manifest.contexts}
    for name, em in parsed.items():
        for n in em.epcontext_nodes:
            where = f"{models[name]}: EPContext node {n.name!r}"
            if n.embedded is not None:
                raise FormatError(f"{where} embeds its context binary; a program's binaries must be "
                                  f"files listed in {manifest.manifest_path}. Rebuild the program.")
            if n.binary_path is None:
                continue
            ctx = listed.get(Path(n.binary_path).resolve())
            if ctx is None:
                raise FormatError(f"{where} names binary {str(n.binary_path)!r}, which "
                                  f"{manifest.manifest_path} does not list; refused (its size and "
                                  f"graphs would go unchecked). Rebuild the program or list the binary.")
            if n.graph_name not in ctx.graphs:
                raise FormatError(f"{where}: graph {n.graph_name!r} is not among the graphs "
                                  f"{manifest.manifest_path} lists for {ctx.path}. Rebuild the program.")


def _open_node_binaries(models: dict[str, Path], parsed: dict[str, Any], root: Path, lib: QnnLibrary,
                        binaries: dict[str, ContextBinary]) -> dict[tuple[str, int], str]:
    """Open the binary each EPContext node names or embeds into `binaries` (once per file); the
    pool key of each such node by (method, node index)."""
    node_key: dict[tuple[str, int], str] = {}
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
    return node_key


def _trusted_by_manifest(manifest: ProgramManifest, binaries: dict[str, ContextBinary]) -> set[str]:
    """The binaries whose sha256 the manifest records, checked (a mismatch is a FormatError)."""
    sha = {c.path: c.sha256 for c in manifest.contexts if c.sha256}
    trusted = set()
    for key, b in binaries.items():
        if key in sha:
            _check_sha256(b, sha[key], manifest.manifest_path)
            trusted.add(key)
    return trusted


def _onnx_methods(models: dict[str, Path], root: Path, lib: QnnLibrary, binaries: dict[str, ContextBinary],
                  manifest: ProgramManifest | None = None) -> Source:
    """Binaries referenced by EPContext models (opened into `binaries`), and a builder for their
    methods. With a program's `manifest`, every node must name a binary and graph the manifest
    lists, and binaries with a recorded sha256 are checked against it before QNN reads them."""
    from qnnrt.formats.epcontext import read_epcontext_model
    parsed = {name: read_epcontext_model(p, root=root) for name, p in models.items()}
    if manifest is not None:
        _check_against_manifest(manifest, models, parsed)
    node_key = _open_node_binaries(models, parsed, root, lib, binaries)

    def resolve_non_main_nodes() -> None:
        """Nodes without a binary of their own use the context holding their graph. This reads
        the binaries' info, so it runs in `build`, after they were vetted or hash-checked."""
        by_graph: dict[str, str] = {}
        for key, b in binaries.items():
            for g in b.graphs:
                by_graph.setdefault(g.name, key)
        for name, em in parsed.items():
            for n in em.epcontext_nodes:
                if (name, n.index) not in node_key:
                    if n.graph_name not in by_graph:
                        raise FormatError(f"{models[name]}: EPContext node {n.name!r} names no context "
                                          f"binary and no other node's binary has graph "
                                          f"{n.graph_name!r}")
                    node_key[(name, n.index)] = by_graph[n.graph_name]

    trusted = _trusted_by_manifest(manifest, binaries) if manifest is not None else set()

    def build() -> dict[str, Method]:
        resolve_non_main_nodes()
        return {name: OnnxMethod(name, em, binaries, lambda n, name=name: node_key[(name, n.index)])
                for name, em in parsed.items()}
    runtime = ({"performance_mode": manifest.target["htp_performance_mode"],
                "where": str(manifest.manifest_path)}
               if manifest is not None and manifest.target.get("htp_performance_mode") else {})
    return Source(build, manifest.target.get("soc_model") if manifest is not None else None,
                  trusted=trusted, runtime=runtime)


def _open_source(p: Path, lib: QnnLibrary, graph: str | None, binaries: dict[str, ContextBinary],
                 owned: list) -> Source:
    """Open a program folder, EPContext model, .pte or .bin: its binaries go into `binaries` as they
    are opened, objects to close after them into `owned` (so a failure half-way frees all)."""
    if is_genie_bundle(p):
        return _genie_source(p, lib, binaries)
    if p.is_dir():
        from qnnrt.formats.program import read_program
        manifest = read_program(p)
        models = {m.name: p / m.model for m in manifest.methods}
        return _onnx_methods(models, p, lib, binaries, manifest)
    if p.suffix == ".onnx":
        return _onnx_methods({p.stem: p}, p.parent, lib, binaries)
    if p.suffix == ".pte":
        from qnnrt.executorch.program import pte_methods, pte_runtime_options
        pte_binaries, pte_build, built_for, pte, constants = pte_methods(p, lib)
        owned.append(pte)
        binaries.update(pte_binaries)
        return Source(pte_build, built_for, constants, runtime=pte_runtime_options(pte))
    key = p.name
    binaries[key] = ContextBinary(p, name=key, lib=lib)

    def build() -> dict[str, Method]:  # reads the binary info: after vetting
        b = binaries[key]
        return {s.name: GraphMethod(key, s) for s in ([b.graph(graph)] if graph is not None else b.graphs)}
    return Source(build)


def _genie_source(p: Path, lib: QnnLibrary, binaries: dict[str, ContextBinary]) -> Source:
    """A Genie bundle: its part binaries (ctx-bins, in order) and one method per variant
    (runtime/genie.py); the extensions file's SoC, perf profile and shared-buffer choice are the
    file's asks, as a .pte's compile spec is."""
    from qnnrt.runtime.genie import genie_methods
    config = read_genie_config(p)
    keys = []
    for path in config.ctx_bins:
        key = _relkey(path, config.folder)
        if key not in binaries:
            binaries[key] = ContextBinary(path, name=key, lib=lib)
            keys.append(key)
    ext = config.backend.extensions
    runtime: dict[str, Any] = {}
    if ext is not None:
        runtime["where"] = str(ext.path)
        if ext.perf_profile:
            runtime["performance_mode"] = ext.perf_profile
        runtime["shared_buffer"] = ext.shared_buffer
    return Source(lambda: genie_methods(keys, binaries, config.context.size),
                  ext.soc_model if ext is not None else None, runtime=runtime, genie=config)


def _soc_of(binaries: dict[str, ContextBinary]) -> int | None:
    """The SoC model the first binary was compiled for (0 / unknown -> None: no device config)."""
    for b in binaries.values():
        return b.info.soc_model or None
    return None


def open_for_planning(path: str | os.PathLike, backend_lib: str | os.PathLike | None = None):
    """(binaries by pool key, methods by name, SoC model, objects to close) of what `load` opens,
    without initialising QNN's backend or creating a context (for `inspect --pd`)."""
    p = _existing_path(path)
    lib = open_library(os.fspath(backend_lib) if backend_lib is not None else None)
    owned: list = []
    binaries: dict[str, ContextBinary] = {}
    with contextlib.ExitStack() as undo:
        undo.callback(_close_opened, binaries, owned)
        src = _open_source(p, lib, None, binaries, owned)
        undo.pop_all()
    return binaries, src.build(), src.built_for or _soc_of(binaries), owned, lib
