"""Reading ONNX Runtime EPContext models: which nodes execute a QNN graph of which context binary,
and which run on the CPU."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from qnnrt.errors import FormatError
from qnnrt.formats.program import check_name

EPCONTEXT_OP = "EPContext"
EPCONTEXT_DOMAIN = "com.microsoft"


@dataclass
class EPContextNode:
    """One EPContext node: graph `graph_name` of a context binary, either a file or embedded bytes
    (or neither: a non-main node whose graph lives in the context another node carries)."""
    index: int
    name: str
    graph_name: str
    inputs: list[str]
    outputs: list[str]
    embed_mode: int
    binary_path: Path | None
    embedded: bytes | None
    main_context: int
    source: str


@dataclass
class EPContextModel:
    path: Path
    model: onnx.ModelProto
    epcontext_nodes: list[EPContextNode] = field(default_factory=list)

    @property
    def graph(self) -> onnx.GraphProto:
        return self.model.graph


_ATTR_TYPES = {"embed_mode": onnx.AttributeProto.INT, "main_context": onnx.AttributeProto.INT,
               "ep_cache_context": onnx.AttributeProto.STRING,
               "partition_name": onnx.AttributeProto.STRING, "source": onnx.AttributeProto.STRING}


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            want = _ATTR_TYPES.get(name)
            if want is not None and a.type != want:
                raise FormatError(
                    f"EPContext node {node.name!r}: attribute {name!r} is of type "
                    f"{onnx.AttributeProto.AttributeType.Name(a.type)}, expected "
                    f"{onnx.AttributeProto.AttributeType.Name(want)}; the model is malformed")
            return onnx.helper.get_attribute_value(a)
    return default


def _text(value, where: str, what: str) -> str:
    """A string attribute as text: UTF-8 without NUL, else FormatError naming the node."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"{where}: attribute {what} is not UTF-8 (byte {e.start}); the model "
                              f"is malformed. Re-export it.") from None
    return check_name(str(value), where, what)


def _int_attr(node: onnx.NodeProto, name: str, default: int, where: str) -> int:
    v = _attr(node, name, default)
    if not isinstance(v, int) or not -(1 << 31) <= v < (1 << 31):
        raise FormatError(f"{where}: attribute {name} = {v!r} is not a small integer; the model is "
                          f"malformed")
    return v


def is_epcontext(node: onnx.NodeProto) -> bool:
    return node.op_type == EPCONTEXT_OP and node.domain == EPCONTEXT_DOMAIN


def _contained(base: Path, bound: Path, rel: str, where: str) -> Path:
    """`base/rel` resolved, refused unless it is a regular file inside `bound` (no absolute path,
    no '..' out of it, no symbolic link leading outside, no link loop)."""
    if not rel:
        raise FormatError(f"{where}: ep_cache_context is empty; it must name a context binary")
    if Path(rel).is_absolute():
        raise FormatError(f"{where} references the absolute path {rel!r}; context binaries must be "
                          f"given relative to the model, inside {bound}")
    if not Path(os.path.normpath(base / rel)).is_relative_to(bound):
        raise FormatError(f"{where} references {rel!r}, which is outside {bound}; "
                          f"context binaries must live inside the program folder")
    try:
        p = (base / rel).resolve(strict=True)
    except FileNotFoundError:
        raise FormatError(f"{where} references context binary {rel!r}, which does not exist "
                          f"({base / rel})") from None
    except (OSError, RuntimeError, ValueError) as e:  # RuntimeError: symlink loop (3.11)
        raise FormatError(f"{where} references {rel!r}, which cannot be resolved ({type(e).__name__}: "
                          f"{e}); a symbolic link loop? Replace links with the files.") from None
    if not p.is_relative_to(bound):
        raise FormatError(f"{where} references {rel!r}, which is outside {bound}; "
                          f"context binaries must live inside the program folder")
    if not p.is_file():
        raise FormatError(f"{where} references {rel!r}, which is not a regular file ({p})")
    return p


def read_epcontext_model(path: str | os.PathLike, root: Path | None = None) -> EPContextModel:
    """Load an EPContext model. `root` (default: the model's folder) bounds where referenced context
    binaries may live: a reference escaping it is refused."""
    path = Path(path)
    try:
        ok = path.is_file()
    except (OSError, ValueError):
        ok = False
    if not ok:
        raise FormatError(f"{path}: no such model file")
    try:
        model = onnx.load(str(path))
    except Exception as e:  # onnx raises DecodeError, OSError, ValidationError ...
        raise FormatError(f"{path}: not a readable ONNX model ({type(e).__name__}: {e})") from e
    base = path.parent.resolve()
    bound = (root or base).resolve()
    out = EPContextModel(path=path, model=model)
    g = model.graph
    for kind, items in (("graph input", g.input), ("graph output", g.output),
                        ("initializer", g.initializer)):
        for k, vi in enumerate(items):
            check_name(vi.name, f"{path}: {kind} {k}", f"{kind} name")
    for i, node in enumerate(g.node):  # protobuf hands invalid UTF-8 over as bytes: refuse it here
        for t in [node.op_type, node.domain, node.name, *node.input, *node.output]:
            check_name(t, f"{path}: node {i}", "name")
    for i, node in enumerate(model.graph.node):
        if node.op_type == EPCONTEXT_OP and node.domain != EPCONTEXT_DOMAIN:
            raise FormatError(f"{path}: node {node.name!r} is an EPContext node of domain "
                              f"{node.domain!r}; expected {EPCONTEXT_DOMAIN!r}")
        if not is_epcontext(node):
            continue
        where = f"{path}: EPContext node {node.name!r}"
        check_name(node.name, f"{path}: node {i}", "node name")
        for t in list(node.input) + list(node.output):
            check_name(t, where, "tensor name")
        if not any(node.output):
            raise FormatError(f"{where} has no outputs; an EPContext node must produce at least one "
                              f"tensor. The model is malformed: re-export it.")
        source = _text(_attr(node, "source", b"") or b"", where, "source")
        if source and "QNN" not in source.upper():
            raise FormatError(f"{where} is for {source!r}; qnnrt runs QNN EPContext nodes only")
        embed_mode = _int_attr(node, "embed_mode", 1, where)
        cache = _attr(node, "ep_cache_context")
        main_context = _int_attr(node, "main_context", 1, where)
        if cache is None and main_context:
            raise FormatError(f"{where} has no ep_cache_context attribute (and is a main context "
                              f"node, so no other node provides its binary)")
        graph_name = _attr(node, "partition_name", None)
        graph_name = _text(graph_name, where, "partition_name") if graph_name is not None else None
        binary_path, embedded = None, None
        if cache is None:
            pass  # a graph of a context another (main) node carries: resolved by graph name
        elif embed_mode == 0:
            rel = _text(cache, where, "ep_cache_context")
            binary_path = _contained(base, bound, rel, where)
        elif embed_mode == 1:
            embedded = cache if isinstance(cache, bytes) else str(cache).encode("latin-1")
        else:
            raise FormatError(f"{where} has embed_mode {embed_mode}; expected 0 or 1")
        out.epcontext_nodes.append(EPContextNode(
            index=i, name=node.name, graph_name=graph_name or node.name,
            inputs=list(node.input), outputs=list(node.output), embed_mode=embed_mode,
            binary_path=binary_path, embedded=embedded,
            main_context=main_context, source=source))
    return out
