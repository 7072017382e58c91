"""Placement and partitioning (no QNN needed): counts, acyclicity, maximality, clear model errors."""
from __future__ import annotations

import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnnrt.compiler import demo
from qnnrt.compiler import partition as P
from qnnrt.errors import BuildError


def _plan(model, cpu_ops):
    info = P.analyze_model(model)
    return P.partition_model(info, P.policy_cpu_nodes(info, set(cpu_ops)))


@pytest.mark.parametrize("preset,cpu_ops,expected", [
    ("tiny", (), 1),
    ("tiny", ("MatMul",), 66),            # the field's structure: 16 layers x 4 + 2
    ("tiny", ("MatMul", "Softmax"), 82),  # softmax on the CPU splits attention in two
    ("pd", ("MatMul",), 402),
])
def test_demo_partition_counts(preset, cpu_ops, expected):
    plan = _plan(demo.make_decoder(preset), cpu_ops)
    assert len(plan.partitions) == expected
    n_cpu = sum(1 for k, _ in plan.steps if k == "cpu")
    assert n_cpu + plan.htp_node_count == len(plan.info.nodes)


def test_decode_variant_has_same_structure():
    a = _plan(demo.make_decoder("tiny"), ("MatMul",))
    b = _plan(demo.make_decoder("tiny", seq=1, start_pos=16), ("MatMul",))
    assert a.signature() == b.signature()


def _random_dag(n, p_edge, seed):
    """A random single-output-per-node DAG of Add/Sinh nodes over one input."""
    rng = random.Random(seed)
    nodes, outs = [], []
    for i in range(n):
        preds = [j for j in range(i) if rng.random() < p_edge][-2:]
        ins = [outs[j] for j in preds] or ["x"]
        if len(ins) == 1:
            ins = ins * 2
        op = "Sinh" if rng.random() < 0.3 else "Add"
        nodes.append(helper.make_node(op, ins[:1] if op == "Sinh" else ins[:2], [f"t{i}"], name=f"n{i}"))
        outs.append(f"t{i}")
    consumed = {t for nd in nodes for t in nd.input}
    graph_outs = [t for t in outs if t not in consumed]
    g = helper.make_graph(nodes, "rand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info(t, TensorProto.FLOAT, [1, 4]) for t in graph_outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("seed", range(25))
def test_random_dags_partitions_are_acyclic_connected_and_maximal(seed):
    model = _random_dag(40, 0.15, seed)
    plan = _plan(model, ("Sinh",))
    info = plan.info
    part_of = {i: p.index for p in plan.partitions for i in p.nodes}
    # each partition is connected through its own edges
    for p in plan.partitions:
        ms = set(p.nodes)
        seen, todo = {p.nodes[0]}, [p.nodes[0]]
        while todo:
            i = todo.pop()
            for j in info.preds(i) + info.succs(i):
                if j in ms and j not in seen:
                    seen.add(j)
                    todo.append(j)
        assert seen == ms
    # the step order is topological (so the step graph is acyclic)
    pos = {}
    for k, (kind, i) in enumerate(plan.steps):
        for node in ([i] if kind == "cpu" else plan.partitions[i].nodes):
            pos[node] = k
    for i in range(len(info.nodes)):
        for j in info.preds(i):
            assert pos[j] <= pos[i]

    # maximal: merging any two partitions joined by an edge would make the step graph cyclic
    def step_of(i):
        return ("p", part_of[i]) if i in part_of else ("c", i)

    def has_cycle(merge):
        def s(i):
            st = step_of(i)
            return ("p", merge[0]) if st in (("p", merge[0]), ("p", merge[1])) else st
        adj = {}
        for i in range(len(info.nodes)):
            for j in info.succs(i):
                if s(i) != s(j):
                    adj.setdefault(s(i), set()).add(s(j))
        color = {}

        def dfs(u):
            color[u] = 1
            for w in adj.get(u, ()):
                if color.get(w) == 1 or (w not in color and dfs(w)):
                    return True
            color[u] = 2
            return False
        return any(dfs(u) for u in list(adj) if u not in color)

    assert not has_cycle((-1, -1))
    for p in plan.partitions:
        for i in p.nodes:
            for s_ in info.succs(i):
                q = part_of.get(s_)
                if q is not None and q != p.index:
                    assert has_cycle((p.index, q))


def _tiny_model(nodes, inits=(), inputs=("x",)):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(i, TensorProto.FLOAT, [1, 4]) for i in inputs],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def test_cycle_is_a_clear_error():
    m = _tiny_model([helper.make_node("Add", ["x", "b"], ["a"], name="n_a"),
                     helper.make_node("Relu", ["a"], ["b"], name="n_b"),
                     helper.make_node("Relu", ["a"], ["y"], name="n_y")])
    with pytest.raises(BuildError, match="cycle"):
        P.analyze_model(m)


def test_missing_initializer_is_a_clear_error():
    m = _tiny_model([helper.make_node("Add", ["x", "W"], ["y"], name="add_w")])
    with pytest.raises(BuildError, match=r"'add_w'.*'W'.*missing initializer"):
        P.analyze_model(m)


def test_double_definition_is_a_clear_error():
    m = _tiny_model([helper.make_node("Relu", ["x"], ["y"], name="a"),
                     helper.make_node("Relu", ["x"], ["y"], name="b")])
    with pytest.raises(BuildError, match="defined more than once"):
        P.analyze_model(m)


def test_dynamic_boundary_shape_is_a_clear_error():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="r"),
                           helper.make_node("Sinh", ["t"], ["y"], name="s")], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    plan = _plan(m, ("Sinh",))
    with pytest.raises(BuildError, match="static shape"):
        P.partition_model_proto(plan, 0)


def test_constant_nodes_become_initializers():
    c = helper.make_node("Constant", [], ["c"], name="c", value=numpy_helper.from_array(np.ones((1, 4), np.float32)))
    m = _tiny_model([c, helper.make_node("Add", ["x", "c"], ["y"], name="add")])
    plan = _plan(m, ())
    assert len(plan.partitions) == 1 and plan.partitions[0].initializers == ["c"]
    sub = P.partition_model_proto(plan, 0)
    onnx.checker.check_model(sub)
