"""Placement and partitioning of an ONNX model into HTP partitions and CPU nodes.

``analyze_model`` checks the model (every input defined, no cycles, static shapes where needed) and
collects tensor types; ``partition_model`` takes the set of nodes that must run on the CPU and cuts the
remaining (HTP) nodes into maximal connected partitions such that the graph of partitions and CPU nodes
stays acyclic: no path leaves a partition and re-enters it through other nodes.

Algorithm: (1) each node gets a level, the most CPU nodes on any path into it; HTP nodes joined by an
edge and on the same level form a group. Every edge leaving a group goes to a higher level, so the
graph of groups and CPU nodes is acyclic by construction. (2) Groups joined by an HTP-HTP edge are
merged further unless a path of steps (groups, CPU nodes) leads from one to the other through a third
step - the check is on the graph of steps, not of nodes: a path may enter a group at one node and
leave it at another. Repeated until no merge happens.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import heapq

import onnx
from onnx import helper

from qnnrt.formats.onnx_graph import node_reads, tensor_type
from qnnrt.errors import BuildError

# Ops with subgraphs (and ops QNN never takes) always run on the CPU.
ALWAYS_CPU_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


@dataclass
class TensorType:
    elem_type: int
    shape: list | None          # ints, or None for unknown rank; entries may be str/None when dynamic

    @property
    def static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) and d >= 0 for d in self.shape)


@dataclass
class ModelInfo:
    """A checked model with its nodes in topological order and every tensor's type."""
    model: onnx.ModelProto
    nodes: list[onnx.NodeProto]                      # topological order, unique non-empty names
    producer: dict[str, int]                         # tensor -> node index
    consumers: dict[str, list[int]]                  # tensor -> node indices
    node_inputs: list[list[str]]                     # per node: data inputs incl. subgraph outer refs
    initializers: dict[str, onnx.TensorProto]
    graph_inputs: list[str]
    graph_outputs: list[str]
    types: dict[str, TensorType]

    def preds(self, i: int) -> list[int]:
        return sorted({self.producer[t] for t in self.node_inputs[i] if t in self.producer})

    def succs(self, i: int) -> list[int]:
        return sorted({c for t in self.nodes[i].output if t for c in self.consumers.get(t, ())})


@dataclass
class Partition:
    """One HTP partition: nodes (topological order) and its boundary tensors."""
    index: int
    nodes: list[int]
    inputs: list[str]
    outputs: list[str]
    initializers: list[str]

    def op_types(self, info: ModelInfo) -> list[str]:
        return [info.nodes[i].op_type for i in self.nodes]


@dataclass
class PartitionPlan:
    info: ModelInfo
    cpu_nodes: dict[int, str]                 # node index -> why it is on the CPU
    partitions: list[Partition]
    steps: list[tuple[str, int]] = field(default_factory=list)   # ("cpu", node) / ("htp", partition)

    @property
    def htp_node_count(self) -> int:
        return sum(len(p.nodes) for p in self.partitions)

    def signature(self) -> list[tuple]:
        """Structure of the plan (op types per step), to compare the methods of a program."""
        out: list[tuple] = []
        for kind, i in self.steps:
            if kind == "cpu":
                out.append(("cpu", self.info.nodes[i].op_type))
            else:
                out.append(("htp", tuple(self.partitions[i].op_types(self.info))))
        return out


def _type_of(vi_type: onnx.TypeProto) -> TensorType | None:
    t = tensor_type(vi_type)
    return TensorType(*t) if t is not None else None


def _constant_value(n: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor a Constant node holds (any attribute form except sparse), named as its output."""
    import numpy as np
    from onnx import numpy_helper
    if len(n.attribute) != 1:
        return None
    a = n.attribute[0]
    if a.name == "value":
        t = onnx.TensorProto()
        t.CopyFrom(a.t)
    elif a.name in ("value_float", "value_floats", "value_int", "value_ints"):
        dtype = np.float32 if a.name.startswith("value_float") else np.int64
        t = numpy_helper.from_array(np.asarray(onnx.helper.get_attribute_value(a), dtype=dtype))
    else:
        return None  # strings / sparse: left as a node (the CPU takes them)
    t.name = n.output[0]
    return t


def _fold_constant_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Constant nodes become initializers (so no partition ever gets a constant as a runtime input)."""
    g = model.graph
    keep, folded = [], []
    for n in g.node:
        t = _constant_value(n) if n.op_type == "Constant" and n.domain in ("", "ai.onnx") else None
        if t is not None:
            folded.append(t)
        else:
            keep.append(n)
    if not folded:
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    m.graph.initializer.extend(folded)
    return m


def analyze_model(model: onnx.ModelProto, source: str = "model") -> ModelInfo:
    """Check ``model`` and index it. Raises BuildError for models that cannot be partitioned."""
    if not isinstance(model, onnx.ModelProto):
        raise BuildError(f"{source}: not an ONNX model")
    g = model.graph
    if len(g.node) == 0:
        raise BuildError(f"{source}: the graph has no nodes")
    model = _fold_constant_nodes(model)
    g = model.graph
    initializers = {t.name: t for t in g.initializer}
    graph_inputs = [i.name for i in g.input if i.name not in initializers]
    graph_outputs = [o.name for o in g.output]

    # unique node names (ORT and the method files need them)
    nodes = [onnx.NodeProto() for _ in g.node]
    seen: set[str] = set()
    for i, (dst, src) in enumerate(zip(nodes, g.node)):
        dst.CopyFrom(src)
        name = src.name or f"{src.op_type}_{i}"
        while name in seen:
            name = f"{name}_{i}"
        dst.name = name
        seen.add(name)

    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for t in n.output:
            if not t:
                continue
            if t in producer or t in initializers or t in graph_inputs:
                raise BuildError(f"{source}: tensor {t!r} is defined more than once (node {n.name!r}); "
                                 "ONNX graphs must be in SSA form")
            producer[t] = i
    node_inputs = []
    for n in nodes:
        node_inputs.append(node_reads(n))
    defined = set(producer) | set(initializers) | set(graph_inputs)
    for i, n in enumerate(nodes):
        for t in node_inputs[i]:
            if t not in defined:
                raise BuildError(
                    f"{source}: node {n.name!r} ({n.op_type}) reads {t!r}, which is neither a graph input, "
                    "an initializer nor the output of a node (a missing initializer?). "
                    "Fix the model, e.g. re-export it with its weights.")
    for t in graph_outputs:
        if t not in defined:
            raise BuildError(f"{source}: graph output {t!r} is not produced by any node")

    # topological order (Kahn, stable by original position); leftovers are on a cycle
    indeg = [0] * len(nodes)
    for i in range(len(nodes)):
        indeg[i] = len({producer[t] for t in node_inputs[i] if t in producer})
    succ = defaultdict(set)
    for i in range(len(nodes)):
        for t in set(node_inputs[i]):
            if t in producer:
                succ[producer[t]].add(i)
    heap = [i for i in range(len(nodes)) if indeg[i] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, j)
    if len(order) != len(nodes):
        stuck = [nodes[i].name for i in range(len(nodes)) if indeg[i] > 0]
        raise BuildError(f"{source}: the graph has a cycle through {len(stuck)} nodes, e.g. "
                         f"{', '.join(repr(s) for s in stuck[:5])}; ONNX graphs must be acyclic")
    nodes = [nodes[i] for i in order]
    node_inputs = [node_inputs[i] for i in order]
    producer = {t: k for k, n in enumerate(nodes) for t in n.output if t}
    consumers: dict[str, list[int]] = defaultdict(list)
    for k, ins in enumerate(node_inputs):
        for t in dict.fromkeys(ins):
            consumers[t].append(k)

    # tensor types: shape inference, then declared value infos
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as e:
        raise BuildError(f"{source}: ONNX shape inference failed: {e}") from e
    types: dict[str, TensorType] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
        t = _type_of(vi.type)
        if t is not None:
            types[vi.name] = t
    for name, t in initializers.items():
        types[name] = TensorType(t.data_type, list(t.dims))
    return ModelInfo(model=model, nodes=nodes, producer=producer, consumers=dict(consumers),
                     node_inputs=node_inputs, initializers=initializers, graph_inputs=graph_inputs,
                     graph_outputs=graph_outputs, types=types)


def policy_cpu_nodes(info: ModelInfo, cpu_ops: set[str] | frozenset[str]) -> dict[int, str]:
    """Nodes the placement policy puts on the CPU: ``--cpu-ops`` and ops QNN never takes."""
    out = {}
    for i, n in enumerate(info.nodes):
        if n.op_type in cpu_ops:
            out[i] = "--cpu-ops"
        elif n.op_type in ALWAYS_CPU_OPS:
            out[i] = "control flow"
    return out


def _boundary(info: ModelInfo, members: list[int]) -> tuple[list[str], list[str], list[str]]:
    mset = set(members)
    inputs, outputs, inits = [], [], []
    seen_in, seen_init = set(), set()
    graph_outs = set(info.graph_outputs)
    for i in members:
        for t in info.node_inputs[i]:
            if t in info.initializers:
                if t not in seen_init:
                    seen_init.add(t)
                    inits.append(t)
            elif info.producer.get(t) not in mset and t not in seen_in:
                seen_in.add(t)
                inputs.append(t)
    for i in members:
        for t in info.nodes[i].output:
            if not t:
                continue
            if t in graph_outs or any(c not in mset for c in info.consumers.get(t, ())):
                outputs.append(t)
    return inputs, outputs, inits


def partition_model(info: ModelInfo, cpu_nodes: dict[int, str]) -> PartitionPlan:
    """Cut the non-CPU nodes into maximal connected partitions keeping the step graph acyclic."""
    n = len(info.nodes)
    htp = [i for i in range(n) if i not in cpu_nodes]
    preds = [info.preds(i) for i in range(n)]
    succs = [info.succs(i) for i in range(n)]
    # 1) levels: the most CPU nodes on any path into a node. Every edge leaving a set of equal-level,
    #    HTP-connected nodes goes to a higher level, so grouping by level is acyclic by construction.
    level = [0] * n
    for i in range(n):
        lv = 0
        for p in preds[i]:
            lv = max(lv, level[p] + (1 if p in cpu_nodes else 0))
        level[i] = lv
    parent = {i: i for i in htp}

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    members = {i: [i] for i in htp}

    def union(x, y):
        if len(members[x]) < len(members[y]):
            x, y = y, x
        parent[y] = x
        members[x].extend(members.pop(y))
        return x

    for v in htp:
        for u in preds[v]:
            if u in parent and level[u] == level[v]:
                x, y = find(u), find(v)
                if x != y:
                    union(x, y)

    # 2) merge further along HTP-HTP edges while the graph of steps (groups and CPU nodes) stays
    #    acyclic: X and Y may merge unless a path of steps leads from one to the other through a
    #    third step.
    def step(i):
        return find(i) if i in parent else ("cpu", i)

    def succs_of_step(s):
        nodes = members[s] if not isinstance(s, tuple) else [s[1]]
        out = set()
        for i in nodes:
            for j in succs[i]:
                out.add(step(j))
        out.discard(s)
        return out

    def path_through_other(x, y):
        todo = [t for t in succs_of_step(x) if t != y]
        seen = set(todo)
        while todo:
            s = todo.pop()
            for t in succs_of_step(s):
                if t == y:
                    return True
                if t not in seen and t != x:
                    seen.add(t)
                    todo.append(t)
        return False

    edges = [(u, v) for v in htp for u in preds[v] if u in parent]
    changed = True
    while changed:
        changed = False
        for u, v in edges:
            x, y = find(u), find(v)
            if x == y or path_through_other(x, y) or path_through_other(y, x):
                continue
            union(x, y)
            changed = True

    groups = {r: sorted(ms) for r, ms in members.items()}
    # step graph: CPU nodes and groups; order it topologically (stable by first node)
    step_of: dict[int, tuple[str, int]] = {}
    for i in cpu_nodes:
        step_of[i] = ("cpu", i)
    for r, ms in groups.items():
        for i in ms:
            step_of[i] = ("grp", r)
    step_first: dict[tuple[str, int], int] = {}
    for i in range(n):
        step_first.setdefault(step_of[i], i)
    step_preds: dict[tuple, set] = defaultdict(set)
    step_succs: dict[tuple, set] = defaultdict(set)
    for i in range(n):
        for p in preds[i]:
            a, b = step_of[p], step_of[i]
            if a != b:
                step_preds[b].add(a)
                step_succs[a].add(b)
    indeg = {s: len(step_preds[s]) for s in step_first}
    heap = [(step_first[s], s) for s in step_first if indeg[s] == 0]
    heapq.heapify(heap)
    ordered = []
    while heap:
        _, s = heapq.heappop(heap)
        ordered.append(s)
        for t in step_succs[s]:
            indeg[t] -= 1
            if indeg[t] == 0:
                heapq.heappush(heap, (step_first[t], t))
    if len(ordered) != len(step_first):   # cannot happen if the merge check is right
        raise BuildError("internal error: the partition graph has a cycle")

    partitions: list[Partition] = []
    steps: list[tuple[str, int]] = []
    for kind, key in ordered:
        if kind == "cpu":
            steps.append(("cpu", key))
            continue
        ms = groups[key]
        ins, outs, inits = _boundary(info, ms)
        part = Partition(index=len(partitions), nodes=ms, inputs=ins, outputs=outs, initializers=inits)
        partitions.append(part)
        steps.append(("htp", part.index))
    return PartitionPlan(info=info, cpu_nodes=dict(cpu_nodes), partitions=partitions, steps=steps)


def _value_info(info: ModelInfo, name: str, what: str) -> onnx.ValueInfoProto:
    t = info.types.get(name)
    if t is None or not t.elem_type:
        raise BuildError(f"tensor {name!r} ({what}) has no known type after shape inference; "
                         "give the model explicit value_info or static input shapes")
    if not t.static:
        raise BuildError(f"tensor {name!r} ({what}) has no static shape ({t.shape}); QNN graphs need static "
                         "shapes - fix the model's input shapes (e.g. python -m onnxruntime.tools."
                         "make_dynamic_shape_fixed)")
    return helper.make_tensor_value_info(name, t.elem_type, t.shape)


def extract_submodel(info: ModelInfo, members: list[int], name: str) -> onnx.ModelProto:
    """A standalone model of ``members`` (topological order), with the boundary as its inputs/outputs."""
    ins, outs, inits = _boundary(info, members)
    what_in = f"an input of {name}"
    what_out = f"an output of {name}"
    graph = helper.make_graph(
        [info.nodes[i] for i in members], name,
        [_value_info(info, t, what_in) for t in ins],
        [_value_info(info, t, what_out) for t in outs],
        [info.initializers[t] for t in inits])
    m = helper.make_model(graph, opset_imports=list(info.model.opset_import),
                          producer_name="qnnrt.compiler")
    m.ir_version = info.model.ir_version or 9
    return m


def partition_model_proto(plan: PartitionPlan, index: int, name: str | None = None) -> onnx.ModelProto:
    part = plan.partitions[index]
    return extract_submodel(plan.info, part.nodes, name or f"partition_{index:04d}")


__all__ = ["ALWAYS_CPU_OPS", "TensorType", "ModelInfo", "Partition", "PartitionPlan", "analyze_model",
           "policy_cpu_nodes", "partition_model", "extract_submodel", "partition_model_proto"]
