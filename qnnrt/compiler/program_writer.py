"""Write a method's EPContext model from a partition plan and its compiled contexts."""
from __future__ import annotations

from typing import Any

import onnx
from onnx import helper

from qnnrt.compiler.compile import EPNode
from qnnrt.compiler.partition import PartitionPlan
from qnnrt.errors import BuildError
from qnnrt.formats.onnx_graph import rename_outer_refs

EPCONTEXT_DOMAIN = "com.microsoft"


def epcontext_node(ep: EPNode, bin_rel_path: str, main_context: bool) -> onnx.NodeProto:
    """An EPContext node calling graph ``ep.graph_name`` of the binary at ``bin_rel_path``."""
    attrs: dict[str, Any] = dict(ep.attributes)
    attrs["ep_cache_context"] = bin_rel_path
    attrs["embed_mode"] = 0
    attrs["main_context"] = 1 if main_context else 0
    attrs["partition_name"] = ep.graph_name
    attrs.setdefault("source", "QNNExecutionProvider")
    return helper.make_node("EPContext", ep.inputs, ep.outputs, name=ep.graph_name, domain=EPCONTEXT_DOMAIN,
                            **attrs)


def method_model(plan: PartitionPlan, calls: dict[int, tuple[str, EPNode]], graph_name: str,
                 rename=None) -> onnx.ModelProto:
    """The method's EPContext model: CPU nodes and one EPContext node per partition, in step order.

    ``calls[p] = (binary path relative to the method file, EPContext node info)`` for every partition p.
    ``rename`` maps the method's tensor names to the names its partitions were compiled with (methods
    after the first of a program get a suffix); the method's own inputs/outputs keep their names and
    are mapped with CPU Identity nodes, as are graph I/O the compiler had to alias.
    """
    info = plan.info
    inits_all = info.initializers

    def R(t: str) -> str:
        if not t or rename is None or t in inits_all:
            return t
        return rename(t)

    nodes: list[onnx.NodeProto] = []
    seen_bins: set[str] = set()
    used: set[str] = set()
    n_alias = 0

    def identity(src: str, dst: str) -> onnx.NodeProto:
        nonlocal n_alias
        n_alias += 1
        return helper.make_node("Identity", [src], [dst], name=f"qnnrt_alias_{n_alias}")

    graph_inputs = [vi for vi in info.model.graph.input if vi.name not in inits_all]
    for vi in graph_inputs:
        if R(vi.name) != vi.name:
            nodes.append(identity(vi.name, R(vi.name)))
    for kind, i in plan.steps:
        if kind == "cpu":
            n = onnx.NodeProto()
            n.CopyFrom(info.nodes[i])
            for k, t in enumerate(n.input):
                n.input[k] = R(t)
            for k, t in enumerate(n.output):
                n.output[k] = R(t)
            rename_outer_refs(n, R)  # If / Loop bodies reading the enclosing graph
            nodes.append(n)
            used.update(info.node_inputs[i])
            continue
        try:
            rel, ep = calls[i]
        except KeyError:
            raise BuildError(f"internal error: partition {i} was not compiled") from None
        part = plan.partitions[i]
        if set(ep.bound(ep.inputs)) != {R(t) for t in part.inputs} or \
                set(ep.bound(ep.outputs)) != {R(t) for t in part.outputs}:
            raise BuildError(f"partition {i}: the compiled graph's I/O {ep.inputs} -> {ep.outputs} differs from "
                             f"the partition's {part.inputs} -> {part.outputs}")
        for q, t in zip(ep.inputs, ep.bound(ep.inputs)):
            if q != t:
                nodes.append(identity(t, q))
        nodes.append(epcontext_node(ep, rel, main_context=rel not in seen_bins))
        for q, t in zip(ep.outputs, ep.bound(ep.outputs)):
            if q != t:
                nodes.append(identity(q, t))
        seen_bins.add(rel)
    input_names = {vi.name for vi in graph_inputs}
    for o in info.graph_outputs:
        if R(o) != o and o not in input_names:  # an input passed straight out needs no alias
            nodes.append(identity(R(o), o))
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        dup = sorted({x for x in names if names.count(x) > 1})
        raise BuildError(f"duplicate node names in the method model: {dup[:5]}")
    # initializers the CPU nodes read, and those that are graph outputs themselves
    inits = [inits_all[t] for t in inits_all if t in used or t in info.graph_outputs]
    produced = {t for n in nodes for t in n.output if t}
    outs = set(info.graph_outputs)
    types = {}
    for t, ty in info.types.items():
        types[R(t)] = ty
    for n in nodes:                       # aliases have their source's type
        if n.op_type == "Identity" and n.name.startswith("qnnrt_alias_") and n.input[0] in types:
            types.setdefault(n.output[0], types[n.input[0]])
    value_info = []
    for t in sorted(produced - outs):
        vt = types.get(t)
        if vt is not None and vt.elem_type:
            value_info.append(helper.make_tensor_value_info(t, vt.elem_type, vt.shape))
    graph = helper.make_graph(nodes, graph_name, graph_inputs, list(info.model.graph.output), inits,
                              value_info=value_info)
    opsets = {o.domain: o.version for o in info.model.opset_import}
    opsets.setdefault(EPCONTEXT_DOMAIN, 1)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()],
                              producer_name="qnnrt.compiler")
    model.ir_version = info.model.ir_version or 9
    return model


__all__ = ["EPCONTEXT_DOMAIN", "epcontext_node", "method_model"]
