"""Small facts about ONNX graphs that both the partitioner and the runtime need."""
from __future__ import annotations

from typing import Callable

import onnx


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs held in a node's attributes (If branches, Loop / Scan bodies)."""
    out: list[onnx.GraphProto] = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def subgraph_outer_refs(node: onnx.NodeProto) -> list[str]:
    """Names a node's subgraphs read from the enclosing scope (implicit inputs)."""
    refs: list[str] = []

    def walk(g: onnx.GraphProto, outer_defined: set[str]) -> None:
        defined = set(outer_defined) | {i.name for i in g.input} | {t.name for t in g.initializer}
        for n in g.node:
            refs.extend(t for t in n.input if t and t not in defined)
            for sg in subgraphs(n):
                walk(sg, defined)
            defined.update(o for o in n.output if o)

    for sg in subgraphs(node):
        walk(sg, set())
    return refs


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Every tensor a node reads: its inputs and its subgraphs' outer-scope references."""
    return [t for t in node.input if t] + subgraph_outer_refs(node)


def rename_outer_refs(node: onnx.NodeProto, rename: Callable[[str], str]) -> None:
    """Rename, in place, what a node's subgraphs read from the enclosing scope."""
    def walk(g: onnx.GraphProto, outer_defined: set[str]) -> None:
        defined = set(outer_defined) | {i.name for i in g.input} | {t.name for t in g.initializer}
        for n in g.node:
            for k, t in enumerate(n.input):
                if t and t not in defined:
                    n.input[k] = rename(t)
            for sg in subgraphs(n):
                walk(sg, defined)
            defined.update(o for o in n.output if o)

    for sg in subgraphs(node):
        walk(sg, set())


Dims = list[int | str | None]


def tensor_type(vi_type: onnx.TypeProto) -> tuple[int, Dims | None] | None:
    """(element type, dims) of a tensor type; dims None when the rank is unknown, a dim is its
    value, its symbolic name, or None. None when it is not a tensor of a known element type."""
    if not vi_type.HasField("tensor_type"):
        return None
    tt = vi_type.tensor_type
    if not tt.elem_type:
        return None
    dims: Dims | None = None
    if tt.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
    return tt.elem_type, dims
