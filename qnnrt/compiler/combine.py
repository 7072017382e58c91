"""Several ONNX partitions as one model for one QNN EP session (compile.py's compile units): the
members chained by CPU-only separators, later members' internal names prefixed, a graph I/O name an
earlier member already defines aliased; and the tensor renaming it (and the builder) uses."""
from __future__ import annotations

import onnx
from onnx import helper

from qnnrt.errors import BuildError

def rename_tensors(model: onnx.ModelProto, fn, rename_initializers: bool = True) -> onnx.ModelProto:
    """A copy of ``model`` with tensor names mapped through ``fn`` (node names too)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inits = {t.name for t in g.initializer}

    def new(name: str) -> str:
        if not name or (name in inits and not rename_initializers):
            return name
        return fn(name)

    for t in list(g.input) + list(g.output) + list(g.initializer) + list(g.value_info):
        t.name = new(t.name)
    for n in g.node:
        n.name = fn(n.name) if n.name else n.name
        for i, t in enumerate(n.input):
            n.input[i] = new(t)
        for i, t in enumerate(n.output):
            n.output[i] = new(t)
    return out


def combine_members(models: list[onnx.ModelProto]) -> tuple[onnx.ModelProto, list[dict[str, str]]]:
    """One model holding ``models`` chained by CPU-only separators (see the module docstring).

    Graph input/output names are kept (ORT binds EPContext I/O to the QNN graph's I/O by name) unless
    an earlier member already defines the name (two members reading the same tensor); such an I/O gets
    an alias. Returns the model and, per member, {alias: original name}.
    """
    from onnx import TensorProto
    nodes, inits, inputs, outputs, value_info = [], [], [], [], []
    opsets: dict[str, int] = {}
    defined: set[str] = set()
    all_aliases: list[dict[str, str]] = []
    prev: tuple[str, int] | None = None   # the previous member's (output name, elem type)
    for j, m in enumerate(models):
        g = m.graph
        io = [vi.name for vi in g.input] + [vi.name for vi in g.output]
        aliases: dict[str, str] = {}
        if j:
            io_map = {t: (f"{t}__qnnrt{j}" if t in defined else t) for t in io}
            aliases = {v: k for k, v in io_map.items() if k != v}
            m = rename_tensors(m, lambda t, io_map=io_map, j=j: io_map.get(t, f"__qnnrt{j}__{t}"))
            g = m.graph
        all_aliases.append(aliases)
        for o in m.opset_import:
            opsets[o.domain] = max(opsets.get(o.domain, 0), o.version)
        if j == 0:
            inputs.extend(g.input)
        else:
            if not len(g.input):
                raise BuildError("internal error: a member without inputs cannot follow another in one binary")
            if prev is None:
                raise BuildError("internal error: no previous member output to carry")
            prev_name, prev_type = prev
            carried = [(f"__qnnrt_sep{j}_in{k}", vi.type.tensor_type.elem_type) for k, vi in enumerate(g.input)]
            carried.append((prev_name, prev_type))
            b_in = [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
                    helper.make_tensor_value_info("cond", TensorProto.BOOL, [])]
            b_out = [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, [])]
            b_nodes = [helper.make_node("Identity", ["cond"], ["cond_out"], name=f"__qnnrt_sep{j}_cond")]
            for k, (_, ty) in enumerate(carried):
                b_in.append(helper.make_tensor_value_info(f"v{k}", ty, None))
                b_out.append(helper.make_tensor_value_info(f"v{k}_out", ty, None))
                b_nodes.append(helper.make_node("Identity", [f"v{k}"], [f"v{k}_out"], name=f"__qnnrt_sep{j}_v{k}"))
            body = helper.make_graph(b_nodes, f"qnnrt_separator_{j}", b_in, b_out)
            inits.append(helper.make_tensor(f"__qnnrt_sep{j}_trips", TensorProto.INT64, [], [0]))
            inits.append(helper.make_tensor(f"__qnnrt_sep{j}_cond", TensorProto.BOOL, [], [True]))
            nodes.append(helper.make_node(
                "Loop", [f"__qnnrt_sep{j}_trips", f"__qnnrt_sep{j}_cond"] + [c[0] for c in carried],
                [vi.name for vi in g.input] + [f"__qnnrt_sep{j}_token"], name=f"__qnnrt_sep{j}", body=body))
            for k, vi in enumerate(g.input):
                v = onnx.ValueInfoProto()
                v.CopyFrom(vi)
                v.name = f"__qnnrt_sep{j}_in{k}"
                inputs.append(v)
                value_info.append(vi)
        nodes.extend(g.node)
        inits.extend(g.initializer)
        outputs.extend(g.output)
        defined.update(vi.name for vi in g.input)
        defined.update(vi.name for vi in g.output)
        defined.update(t for n in g.node for t in n.output if t)
        prev = (g.output[0].name, g.output[0].type.tensor_type.elem_type)
    graph = helper.make_graph(nodes, "qnnrt_compile_unit", inputs, outputs, inits, value_info=value_info)
    out = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())],
                            producer_name="qnnrt.compiler")
    out.ir_version = max(m.ir_version for m in models) or 9
    return out, all_aliases
