"""Compiling a part's graphs (its prompt and token graphs) into one context binary through qnnrt's
ONNX -> QNN path (ONNX Runtime's QNN EP), graphs and tensors renamed to what Genie looks for.
Without weight sharing the graphs are one multi-graph compile unit (compiler.compile_unit, cached
by content); with it, one session per graph with ep.share_ep_contexts (the QNN EP then shares the
weights). Finished parts are cached too, keyed by the source's hash and every option, so a repeated
or interrupted conversion resumes without rewriting or recompiling a part."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import onnx

from qnnrt.compiler.compile import CompileCache, CompileOptions, compile_unit, session_options
from qnnrt.compiler.graph_names import rename_in_binary
from qnnrt.errors import BuildError

PART_CACHE_LAYOUT = 1    # bump when what a part's binary holds changes for the same key
_GRAPH_MODULES = ("graphs.py", "quantize.py", "weights4.py", "compile_parts.py", "drive.py", "reference.py",
                  "lora.py")


def compile_combined(models: list[onnx.ModelProto], labels: list[str], options: CompileOptions,
                     cache: CompileCache, work: Path, data_dir: Path | None = None) -> bytes:
    """One binary of ``models`` (external data relative to ``data_dir``), graphs named ``labels``."""
    unit = compile_unit(models, labels, options, cache, work, data_dir)
    aliases = {alias: name for nodes in unit.members for n in nodes for alias, name in n.aliases.items()}
    return rename_in_binary(unit.bin_path.read_bytes(), dict(zip(unit.graph_names, labels)), aliases)


def compile_shared(models: list[onnx.ModelProto], labels: list[str], options: CompileOptions,
                   work: Path, data_dir: Path | None = None) -> bytes:
    """One weight-shared binary: a session per graph, the last one writing the binary (models with
    external data are saved in ``data_dir``, where their locations point)."""
    import onnxruntime as ort
    names: list[str] = []
    attrs: dict = {}
    d = Path(tempfile.mkdtemp(dir=work))
    for j, model in enumerate(models):
        src, ctx = (data_dir or d) / f"{d.name}_shared_{j}.onnx", d / f"shared_{j}_ctx.onnx"
        onnx.save(model, src)
        last = "1" if j == len(models) - 1 else "0"
        so = session_options(options, {"ep.context_enable": "1", "ep.context_embed_mode": "0",
                                       "ep.context_file_path": str(ctx), "ep.share_ep_contexts": "1",
                                       "ep.stop_share_ep_contexts": last}, {"enable_htp_weight_sharing": "1"})
        try:
            ort.InferenceSession(str(src), sess_options=so)
        except Exception as e:
            raise BuildError(f"the QNN EP cannot compile {labels[j]} (weight-shared): {e}") from e
        node = next(n for n in onnx.load(str(ctx), load_external_data=False).graph.node if n.op_type == "EPContext")
        names.append(node.name)
        attrs = {a.name: a for a in node.attribute}
    blob = (d / attrs["ep_cache_context"].s.decode()).read_bytes()
    return rename_in_binary(blob, dict(zip(names, labels)))


class PartCache:
    """Finished part binaries under ``<compile cache>/convert/<key>.bin`` (written atomically)."""

    def __init__(self, root: Path, enabled: bool = True) -> None:
        self.root, self.enabled = root / "convert", enabled

    @staticmethod
    def key(record: dict) -> str:
        """The key of a part: ``record`` (source hash, options, versions...) and the source of the modules
        that write and quantize its graphs (a change there is a new key, never a stale part)."""
        code = hashlib.sha256(b"".join((Path(__file__).parent / m).read_bytes() for m in _GRAPH_MODULES))
        text = json.dumps({"layout": PART_CACHE_LAYOUT, "code": code.hexdigest(), **record}, sort_keys=True,
                          default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> bytes | None:
        p = self.root / f"{key}.bin"
        return p.read_bytes() if self.enabled and p.is_file() else None

    def put(self, key: str, blob: bytes) -> None:
        if not self.enabled:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{key}.{os.getpid()}.tmp"
        tmp.write_bytes(blob)
        os.replace(tmp, self.root / f"{key}.bin")
