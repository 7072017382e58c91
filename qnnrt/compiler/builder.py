"""``qnnrt build``: ONNX model(s) -> a qnnrt program folder (see docs/program-format.md).

Steps: check each model; place nodes (``--cpu-ops`` + what the QNN EP rejects -> CPU); cut the HTP
nodes into partitions; check that the methods of a multi-method program have the same partition
structure; compile partitions (grouped ``graphs_per_context`` per binary, every method's version of a
partition in the same binary) through the cache; write contexts/*.bin, one EPContext model per method
and program.json.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import onnx

import qnnrt
from qnnrt.compiler import partition as P
from qnnrt.compiler.combine import rename_tensors
from qnnrt.compiler.compile import (CompileCache, CompileOptions, CompiledUnit, EPNode, compile_unit,
                                 default_cache_dir,
                                 probe_unsupported, resolve_soc)
from qnnrt.compiler.program_writer import method_model
from qnnrt.errors import BuildError
from qnnrt.progress import ProgressBar
from qnnrt.units import format_bytes
from qnnrt.fileio import file_sha256, owned_prefix, remove_stale_temps
from qnnrt.formats.program import MANIFEST, ContextEntry, MethodEntry, ProgramManifest, write_program

CONTEXT_DIR = "contexts"
REFERENCE_DIR = "reference"


@dataclass
class BuildOptions:
    cpu_ops: tuple[str, ...] = ()
    graphs_per_context: int = 1
    compile: CompileOptions = field(default_factory=CompileOptions)
    cache_dir: Path | None = None          # None: default_cache_dir()
    use_cache: bool = True
    probe: bool = True                     # ask the QNN EP which nodes it takes
    progress: bool | None = None           # None: a bar when stderr is a terminal
    write_reference: bool = False          # copy the source model(s) to OUT/reference/
    performance_mode: str | None = None    # recorded in program.json: the HTP vote runs default to


@dataclass
class BuildReport:
    out: Path
    methods: list[str]
    partitions: int                        # per method
    binaries: int
    binary_sizes: list[int]
    cpu_nodes: int                         # per method (first method)
    htp_nodes: int
    cpu_reasons: dict[str, int]            # why nodes are on the CPU -> count
    cache_hits: int
    cache_misses: int
    seconds: float
    compile_seconds: float
    manifest: ProgramManifest | None = None

    @property
    def total_bytes(self) -> int:
        return sum(self.binary_sizes)

    def format(self) -> str:
        sizes = self.binary_sizes
        lines = [f"qnnrt build: wrote {self.out}",
                 f"  methods     {', '.join(self.methods)}",
                 f"  placement   {self.htp_nodes} HTP nodes, {self.cpu_nodes} CPU nodes"
                 + (f" ({', '.join(f'{k}: {v}' for k, v in sorted(self.cpu_reasons.items()))})"
                    if self.cpu_reasons else ""),
                 f"  partitions  {self.partitions} per method",
                 f"  binaries    {self.binaries}, {format_bytes(self.total_bytes)} total"
                 + (f" (min {format_bytes(min(sizes))}, median {format_bytes(sorted(sizes)[len(sizes) // 2])}, "
                    f"max {format_bytes(max(sizes))})"
                    if sizes else ""),
                 f"  cache       {self.cache_hits} hit(s), {self.cache_misses} compiled",
                 f"  time        {self.seconds:.1f} s ({self.compile_seconds:.1f} s compiling)"]
        return "\n".join(lines)


def load_model(src: onnx.ModelProto | str | os.PathLike) -> tuple[onnx.ModelProto, str]:
    if isinstance(src, onnx.ModelProto):
        return src, src.graph.name or "model"
    path = Path(src)
    if not path.is_file():
        raise BuildError(f"{path}: no such model file")
    try:
        return onnx.load(str(path)), str(path)
    except Exception as e:
        raise BuildError(f"{path}: not a readable ONNX model ({e})") from e


def place(info: P.ModelInfo, options: BuildOptions, cache: CompileCache, workdir: Path,
          source: str) -> dict[int, str]:
    """Node index -> reason, for every node that runs on the CPU."""
    cpu = P.policy_cpu_nodes(info, set(options.cpu_ops))
    if not options.probe:
        return cpu
    candidates = [i for i in range(len(info.nodes)) if i not in cpu]
    if not candidates:
        return cpu
    probe_model = P.extract_submodel(info, candidates, "qnnrt_probe")
    rejected = probe_unsupported(probe_model, options.compile, cache, workdir)
    if rejected:
        by_name = {n.name: i for i, n in enumerate(info.nodes)}
        for name, ep in rejected.items():
            if name in by_name:
                cpu[by_name[name]] = "QNN EP rejects"
    return cpu


def _check_same_structure(plans: list[tuple[str, P.PartitionPlan]]) -> None:
    (name0, p0), rest = plans[0], plans[1:]
    sig0 = p0.signature()
    for name, p in rest:
        if len(p.partitions) != len(p0.partitions):
            raise BuildError(f"methods {name0!r} and {name!r} do not have the same partition structure: "
                             f"{len(p0.partitions)} vs {len(p.partitions)} partitions. Two-method programs need "
                             "models that differ only in shapes (e.g. sequence length S and 1).")
        sig = p.signature()
        for k, (a, b) in enumerate(zip(sig0, sig)):
            if a != b:
                raise BuildError(f"methods {name0!r} and {name!r} differ at step {k}: {a[0]} {a[1]!r} vs "
                                 f"{b[0]} {b[1]!r}. Two-method programs need the same graph structure.")


def method_namespace(method: str):
    """Tensor renaming for methods after the first: their partitions share binaries with the first
    method's, and graph I/O names must differ within one compile (ORT binds EPContext I/O by name)."""
    return lambda t: f"{t}::{method}"


def group_partitions(n: int, per_context: int, no_input: set[int]) -> list[list[int]]:
    """Consecutive partitions, ``per_context`` per binary; a partition without inputs gets its own."""
    groups: list[list[int]] = []
    cur: list[int] = []
    for p in range(n):
        if p in no_input:
            if cur:
                groups.append(cur)
                cur = []
            groups.append([p])
            continue
        cur.append(p)
        if len(cur) == per_context:
            groups.append(cur)
            cur = []
    if cur:
        groups.append(cur)
    return groups


def _prepare_out(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise BuildError(f"{out}: exists and is not a folder; choose another -o")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise BuildError(f"{out}: folder is not empty and holds no qnnrt program; choose another -o "
                         "(qnnrt only replaces folders it wrote)")
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out.parent, f".{out.name}.building-")      # of builds that were SIGKILLed
    return Path(tempfile.mkdtemp(prefix=owned_prefix(f".{out.name}.building-"), dir=out.parent))


def build_program(models: Sequence[tuple[str, onnx.ModelProto | str | os.PathLike]], out: str | os.PathLike,
                  options: BuildOptions | None = None, source: str | None = None,
                  build_extra: dict | None = None) -> BuildReport:
    """Build a program from ``[(method name, model or path), ...]`` into folder ``out``."""
    options = options or BuildOptions()
    t_start = time.perf_counter()
    if not models:
        raise BuildError("no model given")
    names = [m for m, _ in models]
    if len(set(names)) != len(names) or not all(names):
        raise BuildError(f"method names must be unique and non-empty, got {names}")
    for nm in names:
        if not nm.replace("_", "").replace("-", "").isalnum():
            raise BuildError(f"method name {nm!r}: use letters, digits, '_' and '-' only")
    if options.graphs_per_context < 1:
        raise BuildError(f"--graphs-per-context must be >= 1, got {options.graphs_per_context}")
    out = Path(out).resolve()  # `-o .` must name the folder, not '.'
    cache = CompileCache(Path(options.cache_dir) if options.cache_dir else default_cache_dir(),
                         enabled=options.use_cache)
    stage = _prepare_out(out)
    remove_stale_temps(tempfile.gettempdir(), "qnnrt-build-")
    work = Path(tempfile.mkdtemp(prefix=owned_prefix("qnnrt-build-")))
    try:
        loaded = []
        for name, src in models:
            model, where = load_model(src)
            loaded.append((name, model, where))
        plans: list[tuple[str, P.PartitionPlan]] = []
        reasons: Counter = Counter()
        for name, model, where in loaded:
            info = P.analyze_model(model, source=where)
            unknown = sorted(set(options.cpu_ops) - {n.op_type for n in info.nodes})
            if unknown:
                logging.getLogger("qnnrt.compiler").warning(
                    "%s: --cpu-ops %s match no node of the model (op types are case-sensitive, "
                    "e.g. MatMul)", where, ",".join(unknown))
            cpu = place(info, options, cache, work, where)
            plan = P.partition_model(info, cpu)
            while any(not part.inputs for part in plan.partitions):
                # QNN refuses graphs without inputs (constant-only subgraphs): the CPU computes them
                for part in plan.partitions:
                    if not part.inputs:
                        cpu.update({i: "no runtime input (QNN needs graph inputs)" for i in part.nodes})
                plan = P.partition_model(info, cpu)
            if not plan.partitions:
                raise BuildError(f"{where}: no node is left for the HTP (all {len(info.nodes)} nodes are on the CPU)")
            plans.append((name, plan))
            if not reasons:
                reasons.update(cpu.values())
        if len(plans) > 1:
            _check_same_structure(plans)
        plan0 = plans[0][1]
        n_parts = len(plan0.partitions)
        no_input = {p for p in range(n_parts) if any(not pl.partitions[p].inputs for _, pl in plans)}
        groups = group_partitions(n_parts, options.graphs_per_context, no_input)

        (stage / CONTEXT_DIR).mkdir()
        with ProgressBar("compiling", len(groups), options.progress, unit="contexts") as progress:
            cached = 0
            calls: dict[str, dict[int, tuple[str, EPNode]]] = {name: {} for name, _ in plans}
            contexts: list[ContextEntry] = []
            t_compile = time.perf_counter()
            for gi, group in enumerate(groups):
                members, labels, owners = [], [], []
                for p in group:
                    for k, (name, plan) in enumerate(plans):
                        proto = P.partition_model_proto(plan, p, name=f"{name}_p{p:04d}")
                        if k:
                            proto = rename_tensors(proto, method_namespace(name), rename_initializers=False)
                        members.append(proto)
                        labels.append(f"partition {p} of method {name!r}")
                        owners.append((name, p))
                unit: CompiledUnit = compile_unit(members, labels, options.compile, cache, work)
                ctx_name = f"ctx_{gi:03d}" if len(groups) <= 1000 else f"ctx_{gi:05d}"
                rel = f"{CONTEXT_DIR}/{ctx_name}.bin"
                shutil.copyfile(unit.bin_path, stage / rel)
                for (name, p), eps in zip(owners, unit.members):
                    if len(eps) != 1:
                        raise BuildError(f"partition {p} of {name!r} compiled into {len(eps)} graphs; expected 1")
                    calls[name][p] = (rel, eps[0])
                contexts.append(ContextEntry(ctx_name, rel, unit.size, unit.graph_names,
                                             sha256=file_sha256(stage / rel)))
                cached += int(unit.cache_hit)
                progress.update(gi + 1, note=f" ({cached} cached)")
        compile_seconds = time.perf_counter() - t_compile

        methods = []
        for k, ((name, plan), (_, model, where)) in enumerate(zip(plans, loaded)):
            mm = method_model(plan, calls[name], graph_name=f"{name}",
                              rename=method_namespace(name) if k else None)
            onnx.save(mm, str(stage / f"{name}.onnx"))
            methods.append(MethodEntry(name, f"{name}.onnx"))
        reference = {}
        if options.write_reference:
            (stage / REFERENCE_DIR).mkdir()
            for name, model, _ in loaded:
                rel = f"{REFERENCE_DIR}/{name}.onnx"
                onnx.save(model, str(stage / rel))
                reference[name] = rel
        c = options.compile
        build_info = {"tool": "qnnrt", "tool_version": qnnrt.__version__,
                      "source": source or ", ".join(w for _, _, w in loaded),
                      "cpu_ops": list(options.cpu_ops), "graphs_per_context": options.graphs_per_context,
                      "precision": c.precision, "partitions": n_parts,
                      "probe": options.probe, **({"reference": reference} if reference else {}),
                      **(build_extra or {})}
        target = {"soc_model": c.soc_model, "htp_arch": c.htp_arch,
                  **({"htp_performance_mode": options.performance_mode} if options.performance_mode else {})}
        write_program(stage, methods, contexts, target=target, build=build_info)
        # swap the finished folder in
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / "x")
            os.replace(stage, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(stage, out)
        from qnnrt.formats.program import read_program
        manifest = read_program(out)
        return BuildReport(out=out, methods=names, partitions=n_parts, binaries=len(contexts),
                           binary_sizes=[x.size for x in contexts],
                           cpu_nodes=len(plan0.cpu_nodes), htp_nodes=plan0.htp_node_count,
                           cpu_reasons=dict(reasons), cache_hits=cache.hits, cache_misses=cache.misses,
                           seconds=time.perf_counter() - t_start, compile_seconds=compile_seconds,
                           manifest=manifest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


def build_demo(preset: str, out: str | os.PathLike, two_method: bool = False,
               options: BuildOptions | None = None) -> BuildReport:
    """Build a demo program; the float32 source models go to OUT/reference/ for reference runs."""
    from qnnrt.compiler import demo
    cfg = demo.demo_config(preset)
    options = replace(options or BuildOptions(cpu_ops=cfg.cpu_ops), write_reference=True)
    models = demo.demo_models(cfg, two_method=two_method)
    return build_program(models, out, options, source=f"demo:{cfg.name}",
                         build_extra={"demo": {"preset": cfg.name, "two_method": two_method}})


__all__ = ["BuildOptions", "BuildReport", "build_program", "build_demo", "group_partitions",
           "place", "load_model", "resolve_soc", "CONTEXT_DIR", "REFERENCE_DIR"]
