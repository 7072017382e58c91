"""Compile ONNX partitions into QNN HTP context binaries with ONNX Runtime's QNN EP.

One *compile unit* is a list of ONNX models (partitions) whose QNN graphs go into one context binary.
A unit of one model is a plain EPContext generation. A unit of several models is compiled as ONE
model in ONE session, the members chained by CPU-only separators (a ``Loop`` with zero iterations that
passes the next member's inputs through and also consumes the previous member's output). The QNN EP
then cuts exactly one partition per member and writes one ``.bin`` holding one graph per member, in
member order. Members after the first get their internal tensor and initializer names prefixed; graph I/O names stay
(ONNX Runtime binds an EPContext node's inputs/outputs to the QNN graph's by name), except where an
earlier member already defines the name - then the member's graph uses an alias and the method file
maps it with a CPU Identity node. (Methods after the first carry their own tensor-name suffix, so the
prefill and decode versions of a partition do not collide; see builder.py.)

Why not ``ep.share_ep_contexts``: it also yields one ``.bin`` with several graphs, but the QNN EP then
enables HTP weight sharing, and the x86 simulator's ``contextCreateFromBinary`` crashes (SIGSEGV) on
such binaries (QNN 2.51, onnxruntime-qnn 2.7) - with or without the weight-sharing context config.

Results go through a content-addressed cache (key: the models' bytes, the compile options, and the
ONNX Runtime / QNN versions): ``$QNNRT_CACHE_DIR``, else ``$XDG_CACHE_HOME/qnnrt``, else
``~/.cache/qnnrt``.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx

from qnnrt import soc as soc_table
from qnnrt.errors import BuildError, QnnrtError
from qnnrt.fileio import default_cache_dir, file_sha256, read_json
from qnnrt.compiler.combine import combine_members
from qnnrt.compiler.external import external_files
from qnnrt.soc import parse_soc

EP_NAME = "QNNExecutionProvider"
CACHE_LAYOUT = 2      # bump when the cache entry layout or the compile recipe changes

PRECISIONS = ("fp16", "fp32")


@dataclass(frozen=True)
class CompileOptions:
    """What the QNN EP is asked to target."""
    soc_model: int = 43
    htp_arch: int | None = 73
    precision: str = "fp16"

    def provider_options(self) -> dict[str, str]:
        import onnxruntime_qnn as oq
        opts = {"backend_path": oq.get_qnn_htp_path(),
                "enable_htp_fp16_precision": "1" if self.precision == "fp16" else "0",
                "soc_model": str(self.soc_model)}
        if self.htp_arch is not None:
            opts["htp_arch"] = str(self.htp_arch)
        return opts

    def token(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def resolve_soc(soc: str | int | None, htp_arch: int | None = None, precision: str = "fp16") -> CompileOptions:
    """``--soc SM8550`` or ``--soc 43`` (+ optional arch override) -> CompileOptions."""
    if precision not in PRECISIONS:
        raise BuildError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    try:
        number = parse_soc(soc if soc not in (None, "") else soc_table.DEFAULT)
    except QnnrtError as e:
        raise BuildError(str(e)) from None
    assert number is not None
    arch = soc_table.htp_arch_of(number)
    if htp_arch is not None:
        arch = int(htp_arch)
    return CompileOptions(soc_model=number, htp_arch=arch, precision=precision)


def toolchain_versions() -> dict[str, str]:
    """ONNX Runtime, onnxruntime-qnn and QNN HTP library identity (part of every cache key)."""
    import onnxruntime as ort
    import onnxruntime_qnn as oq
    htp = Path(oq.get_qnn_htp_path())
    try:
        st = htp.stat()
        lib = f"{st.st_size}"
    except OSError:
        lib = "missing"
    return {"onnxruntime": ort.__version__, "onnxruntime_qnn": getattr(oq, "__version__", "?"),
            "libQnnHtp": lib}


_EP_LOCK = threading.Lock()
_EP_DEVICES = None


def qnn_ep_devices():
    """The QNN EP's OrtEpDevices, registering the onnxruntime-qnn plugin library once."""
    global _EP_DEVICES
    with _EP_LOCK:
        if _EP_DEVICES:
            return _EP_DEVICES
        try:
            import onnxruntime as ort
            import onnxruntime_qnn as oq
        except ImportError as e:
            raise BuildError(f"the QNN EP is not available ({e}); install onnxruntime-qnn") from e
        # load the QNN libraries through qnnrt first (RTLD_LOCAL, their stdout banner silenced):
        # ORT's later dlopen of the same files reuses them
        try:
            from qnnrt._capi.library import open_library
            open_library()
        except Exception:  # noqa: BLE001 - ORT reports its own errors below
            pass
        devs = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
        if not devs:
            try:
                ort.register_execution_provider_library(EP_NAME, oq.get_library_path())
            except Exception as e:
                if "already" not in str(e).lower():
                    raise BuildError(f"cannot register the QNN EP library {oq.get_library_path()}: {e}") from e
            devs = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
        if not devs:
            raise BuildError("ONNX Runtime lists no QNN EP device after registering onnxruntime-qnn")
        _EP_DEVICES = devs
        return devs


def session_options(options: CompileOptions, config: dict[str, str], provider: dict[str, str] | None = None):
    """ONNX Runtime session options with the QNN EP for ``options`` (plus ``provider`` EP options) and the
    session ``config`` entries; graph optimizations off (the EP compiles the graph as written)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_provider_for_devices(qnn_ep_devices(), {**options.provider_options(), **(provider or {})})
    for k, v in config.items():
        so.add_session_config_entry(k, v)
    return so


def qnn_session(model: str | os.PathLike, options: CompileOptions | None = None,
                config: dict[str, str] | None = None):
    """An ONNX Runtime session on ``model`` with the QNN EP (e.g. to run or compile EPContext models)."""
    import onnxruntime as ort
    so = session_options(options or CompileOptions(), config or {})
    if not (config or {}).get("ep.context_enable"):
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # running: ORT's default
    return ort.InferenceSession(str(model), sess_options=so)


@dataclass
class EPNode:
    """One EPContext node ORT wrote for a compiled model."""
    name: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, int | str]
    aliases: dict[str, str] = field(default_factory=dict)   # graph I/O name -> the method's tensor name

    def bound(self, names: list[str]) -> list[str]:
        """The method tensors bound to graph I/O ``names``."""
        return [self.aliases.get(t, t) for t in names]

    @property
    def graph_name(self) -> str:
        return str(self.attributes.get("partition_name", self.name))

    @staticmethod
    def from_node(node: onnx.NodeProto) -> "EPNode":
        attrs: dict[str, int | str] = {}
        for a in node.attribute:
            if a.type == onnx.AttributeProto.INT:
                attrs[a.name] = int(a.i)
            elif a.type == onnx.AttributeProto.STRING:
                attrs[a.name] = a.s.decode("utf-8", "replace")
        return EPNode(node.name, list(node.input), list(node.output), attrs)


@dataclass
class CompiledUnit:
    """A context binary and, per member model, the EPContext node(s) that call its graphs."""
    key: str
    bin_path: Path
    size: int
    members: list[list[EPNode]]
    cache_hit: bool
    seconds: float = 0.0

    @property
    def graph_names(self) -> list[str]:
        return [n.graph_name for nodes in self.members for n in nodes]


@dataclass
class CompileCache:
    """Content-addressed store of compiled units: ``ROOT/contexts/ab/abcd.../{context.bin,meta.json}``."""
    root: Path
    enabled: bool = True
    hits: int = 0
    misses: int = 0

    def entry(self, key: str) -> Path:
        return self.root / "contexts" / key[:2] / key

    def get(self, key: str) -> CompiledUnit | None:
        if not self.enabled:
            return None
        d = self.entry(key)
        try:
            meta = read_json(d / "meta.json", "compile cache entry")
            bin_path = d / "context.bin"
            size = bin_path.stat().st_size
            if size != meta["size"] or file_sha256(bin_path) != meta["sha256"]:
                return None  # damaged (or written by an older qnnrt): recompiled and replaced
            members = [[EPNode(**n) for n in nodes] for nodes in meta["members"]]
        except (QnnrtError, OSError, ValueError, KeyError, TypeError):
            return None
        return CompiledUnit(key, bin_path, size, members, cache_hit=True)

    def put(self, unit: CompiledUnit, extra: dict) -> CompiledUnit:
        if not self.enabled:
            return unit
        final = self.entry(unit.key)
        tmp_root = self.root / "tmp"
        tmp_root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=tmp_root))
        shutil.copyfile(unit.bin_path, tmp / "context.bin")
        meta = {"key": unit.key, "size": unit.size, "sha256": file_sha256(tmp / "context.bin"),
                "members": [[asdict(n) for n in m] for m in unit.members],
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(tmp, final)
        except OSError:
            if self.get(unit.key) is None:  # a damaged entry (e.g. its .bin deleted): replace it
                stale = Path(tempfile.mkdtemp(dir=tmp_root))
                try:
                    os.replace(final, stale / "x")
                    os.replace(tmp, final)
                except OSError:
                    pass
                shutil.rmtree(stale, ignore_errors=True)
            shutil.rmtree(tmp, ignore_errors=True)  # else another process filled it: keep theirs
        got = self.get(unit.key)
        if got is None:
            return unit
        got.cache_hit = False
        got.seconds = unit.seconds
        return got

    # probe results (which nodes the QNN EP rejects) are cached as small JSON files
    def get_json(self, kind: str, key: str):
        if not self.enabled:
            return None
        try:
            return read_json(self.root / kind / f"{key}.json", "compile cache entry")
        except QnnrtError:
            return None

    def put_json(self, kind: str, key: str, value) -> None:
        if not self.enabled:
            return
        d = self.root / kind
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(value))
        os.replace(tmp, d / f"{key}.json")


def unit_key(models: list[onnx.ModelProto], labels: list[str], options: CompileOptions,
             data_dir: Path | None = None) -> str:
    """The cache key of a unit: the models (serialized one at a time), the data files their external
    initializers name (by content), the options and the toolchain."""
    h = hashlib.sha256()
    h.update(f"qnnrt-compile-unit/{CACHE_LAYOUT}\n".encode())
    h.update(json.dumps(toolchain_versions(), sort_keys=True).encode())
    h.update(options.token().encode())
    files: set[str] = set()
    for label, model in zip(labels, models):
        data = model.SerializeToString()
        h.update(f"\n{label}\n{len(data)}\n".encode())
        h.update(data)
        del data
        files |= external_files(model)
    if files and data_dir is None:
        raise BuildError(f"compiling {', '.join(labels)}: the models keep weights in {sorted(files)}; "
                         "internal error: no data_dir given")
    for name in sorted(files):
        h.update(f"\n{name}\n{file_sha256(Path(data_dir or '.') / name)}\n".encode())
    return h.hexdigest()


def _describe(model: onnx.ModelProto) -> str:
    ops: dict[str, int] = {}
    for n in model.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return ", ".join(f"{k} x{v}" if v > 1 else k for k, v in ops.items())


def compile_unit(models: list[onnx.ModelProto], labels: list[str], options: CompileOptions,
                 cache: CompileCache, workdir: Path, data_dir: Path | None = None) -> CompiledUnit:
    """Compile ``models`` into one context binary (cached). ``labels`` name the members in errors;
    ``data_dir``: the folder the models' external data locations are relative to (external.py)."""
    import onnxruntime as ort
    key = unit_key(models, labels, options, data_dir)
    hit = cache.get(key)
    if hit is not None:
        cache.hits += 1
        return hit
    cache.misses += 1
    t0 = time.perf_counter()
    d = Path(tempfile.mkdtemp(prefix=f"u{key[:12]}_", dir=workdir))
    with contextlib.ExitStack() as undo:
        undo.callback(shutil.rmtree, d, ignore_errors=True)  # kept only when the cache stored it there
        aliases: list[dict[str, str]] = [{}]
        if len(models) == 1:
            data = models[0].SerializeToString()
        else:
            combined, aliases = combine_members(models)
            data = combined.SerializeToString()
            del combined
        # ORT derives the QNN graph names from the model's path: a path per unit keeps them apart.
        src = (d if data_dir is None else Path(data_dir)) / f"unit_{key[:16]}.onnx"
        src.write_bytes(data)
        del data                         # the session reads the file: no copy of the model kept here
        ctx = d / "unit_ctx.onnx"
        cfg = {"ep.context_enable": "1", "ep.context_embed_mode": "0", "ep.context_file_path": str(ctx),
               # with several members the separators must run on the CPU; the result is checked below
               "session.disable_cpu_ep_fallback": "1" if len(models) == 1 else "0"}
        if len(models) > 1:
            cfg["session.record_ep_graph_assignment_info"] = "1"
        what = labels[0] if len(labels) == 1 else f"{', '.join(labels)} (one binary)"
        try:
            sess = ort.InferenceSession(str(src), sess_options=session_options(options, cfg))
        except Exception as e:
            msg = [line for line in str(e).strip().splitlines() if line.strip()]
            ops = "; ".join(f"{lab}: {_describe(m)}" for lab, m in zip(labels, models))
            raise BuildError(
                f"the QNN EP cannot compile {what} with CPU fallback disabled: "
                f"{msg[-1] if msg else type(e).__name__}\n  ops: {ops}\n"
                "What to do: put the op(s) QNN rejects on the CPU (--cpu-ops OP,...), or let qnnrt probe "
                "which ops the QNN EP takes (do not pass --no-probe).") from e
        finally:
            src.unlink(missing_ok=True)
        if len(models) > 1:
            stray = [n.name for sg in sess.get_provider_graph_assignment_info() if sg.ep_name != EP_NAME
                     for n in sg.get_nodes() if not n.name.startswith("__qnnrt_sep")]
            if stray:
                raise BuildError(f"the QNN EP left nodes of {what} to the CPU: {stray[:8]}. "
                                 "What to do: put those op types on the CPU (--cpu-ops).")
        del sess
        if not Path(ctx).is_file():
            raise BuildError(f"compiling {what}: ONNX Runtime wrote no EPContext model (the QNN EP took "
                             f"none of its nodes: {'; '.join(_describe(m) for m in models)}). "
                             "What to do: put these ops on the CPU (--cpu-ops).")
        cm = onnx.load(str(ctx), load_external_data=False)
        ep_nodes = [n for n in cm.graph.node if n.op_type == "EPContext"]
        others = [n.op_type for n in cm.graph.node if n.op_type != "EPContext" and not n.name.startswith("__qnnrt_sep")]
        if len(ep_nodes) != len(models) or others:
            raise BuildError(f"compiling {what}: ORT produced {len(ep_nodes)} EPContext node(s) for {len(models)} "
                             f"partition(s) and CPU nodes {others}; expected one EPContext node per partition")
        members: list[list[EPNode]] = []
        bins: set[str] = set()
        for j, (node, m) in enumerate(zip(ep_nodes, models)):
            ep = EPNode.from_node(node)
            ep.aliases = dict(aliases[j])
            want_in = {vi.name for vi in m.graph.input}
            want_out = {vi.name for vi in m.graph.output}
            if set(ep.bound(ep.inputs)) != want_in or set(ep.bound(ep.outputs)) != want_out:
                raise BuildError(f"compiling {labels[j]}: the EPContext node's inputs/outputs {ep.inputs} -> "
                                 f"{ep.outputs} do not match the partition's {sorted(want_in)} -> {sorted(want_out)}")
            if int(ep.attributes.get("embed_mode", 0)) != 0:
                raise BuildError(f"compiling {labels[j]}: ORT embedded the context despite embed_mode 0")
            if ep.attributes.get("ep_cache_context"):     # only main_context nodes name the binary
                bins.add(str(ep.attributes["ep_cache_context"]))
            members.append([ep])
        if len(bins) != 1:
            raise BuildError(f"compiling {what}: expected one context binary, ORT wrote {sorted(bins)}")
        bin_path = d / bins.pop()
        if not bin_path.is_file():
            raise BuildError(f"compiling {what}: ORT did not write {bin_path.name}")
        names = [n.graph_name for nodes in members for n in nodes]
        if len(set(names)) != len(names):
            raise BuildError(f"compiling {', '.join(labels)}: duplicate graph names in one binary: {names}")
        unit = CompiledUnit(key, bin_path, bin_path.stat().st_size, members, cache_hit=False,
                            seconds=time.perf_counter() - t0)
        stored = cache.put(unit, {"labels": labels, "options": asdict(options), "versions": toolchain_versions()})
        if stored.bin_path == bin_path:
            undo.pop_all()
        return stored


def probe_unsupported(model: onnx.ModelProto, options: CompileOptions, cache: CompileCache,
                      workdir: Path) -> dict[str, str]:
    """Names of the nodes of ``model`` the QNN EP does not take -> the EP they went to.

    Asks the QNN EP itself: one session on ``model`` with CPU fallback allowed and the session's
    graph assignment recorded. Nodes ORT's layout pass removed count as taken. Cached by content.
    """
    import onnxruntime as ort
    data = model.SerializeToString()
    h = hashlib.sha256()
    h.update(f"qnnrt-probe/{CACHE_LAYOUT}\n".encode())
    h.update(json.dumps(toolchain_versions(), sort_keys=True).encode())
    h.update(options.token().encode())
    h.update(data)
    key = h.hexdigest()
    got = cache.get_json("probe", key)
    if isinstance(got, dict):
        return got
    src = Path(tempfile.mkdtemp(prefix="probe_", dir=workdir)) / "probe.onnx"
    src.write_bytes(data)
    try:
        so = session_options(options, {"session.record_ep_graph_assignment_info": "1"})
        try:
            sess = ort.InferenceSession(str(src), sess_options=so)
        except Exception as e:
            msg = str(e).strip().splitlines()
            raise BuildError("probing which ops the QNN EP takes failed: "
                             f"{msg[-1] if msg else type(e).__name__}\n"
                             "What to do: name the failing op type(s) in --cpu-ops.") from e
        out: dict[str, str] = {}
        for sg in sess.get_provider_graph_assignment_info():
            if sg.ep_name != EP_NAME:
                for n in sg.get_nodes():
                    out[n.name] = sg.ep_name
        del sess
    finally:
        shutil.rmtree(src.parent, ignore_errors=True)
    cache.put_json("probe", key, out)
    return out


__all__ = ["EP_NAME", "PRECISIONS", "CompileOptions", "resolve_soc",
           "toolchain_versions", "qnn_ep_devices", "default_cache_dir", "EPNode", "CompiledUnit",
           "CompileCache", "unit_key", "compile_unit", "probe_unsupported"]
