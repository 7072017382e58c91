"""Models at the edges of the partitioner and program writer: constants and inputs as outputs, all
Constant forms, input-less HTP subgraphs, If bodies reading the enclosing graph, two-method programs.
Each program must build, run in qnnrt like ONNX Runtime's CPU EP on the source model, and load in
ONNX Runtime with the QNN EP."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import qnnrt
from qnnrt.compiler.builder import BuildOptions, build_program
from qnnrt.compiler.compile import qnn_session
from qnnrt.compiler.demo import reference_outputs

RNG = np.random.default_rng(0)
X = RNG.standard_normal((1, 4)).astype(np.float32)
W1 = numpy_helper.from_array(RNG.standard_normal((4, 4)).astype(np.float32), "w1")
W2 = numpy_helper.from_array(RNG.standard_normal((4, 4)).astype(np.float32), "w2")


def vi(name, shape=(1, 4)):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def mk(nodes, inputs, outputs, inits=()):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def if_model(s=1):
    then_g = helper.make_graph([helper.make_node("Neg", ["a"], ["t_out"])], "then", [],
                               [vi("t_out", (s, 4))])
    else_g = helper.make_graph([helper.make_node("Abs", ["a"], ["e_out"])], "else", [],
                               [vi("e_out", (s, 4))])
    return mk([helper.make_node("Relu", ["x"], ["a"]),
               helper.make_node("If", ["cond"], ["b"], then_branch=then_g, else_branch=else_g),
               helper.make_node("Sigmoid", ["b"], ["z"])],
              [vi("x", (s, 4))], [vi("z", (s, 4))],
              [numpy_helper.from_array(np.array(True), "cond")])


CASES = {
    "initializer_output": (mk([helper.make_node("Relu", ["x"], ["z"])], [vi("x")],
                              [vi("z"), vi("w1", (4, 4))], [W1]), ()),
    "constant_output": (mk([helper.make_node("Constant", [], ["c"], value_floats=[1, 2, 3, 4]),
                            helper.make_node("Relu", ["x"], ["z"])], [vi("x")],
                           [vi("z"), vi("c", (4,))]), ()),
    "constant_floats_to_cpu": (mk([helper.make_node("Constant", [], ["k"], value_floats=[.5, 1, 2, 3]),
                                   helper.make_node("Relu", ["x"], ["r"]),
                                   helper.make_node("Mul", ["r", "k"], ["z"])],
                                  [vi("x")], [vi("z")]), ("Mul",)),
    "inputless_partition": (mk([helper.make_node("Mul", ["w1", "w2"], ["w"]),
                                helper.make_node("MatMul", ["x", "w"], ["y"]),
                                helper.make_node("Relu", ["y"], ["z"])],
                               [vi("x")], [vi("z")], [W1, W2]), ("MatMul",)),
    "input_is_output": (mk([helper.make_node("Relu", ["x"], ["y"])], [vi("x")],
                           [vi("y"), vi("x")]), ()),
    "if_reads_outer_scope": (if_model(), ()),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_edge_case_builds_and_runs(case, tmp_path):
    model, cpu_ops = CASES[case]
    out = tmp_path / "prog"
    build_program([("forward", model)], out, BuildOptions(cpu_ops=cpu_ops, progress=False))
    ref = reference_outputs(model, {"x": X})
    with qnnrt.load(out) as prog:
        got = prog.run("forward", {"x": X})
    assert set(got) == set(ref)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=2e-2, atol=2e-2)
    ort_out = qnn_session(out / "forward.onnx").run(None, {"x": X})
    assert len(ort_out) == len(ref)


@pytest.mark.parametrize("make", [if_model, lambda s: mk([helper.make_node("Relu", ["x"], ["y"])],
                                                          [vi("x", (s, 4))],
                                                          [vi("y", (s, 4)), vi("x", (s, 4))])],
                         ids=["if_reads_outer_scope", "input_is_output"])
def test_two_method_edge_cases(make, tmp_path):
    out = tmp_path / "prog"
    build_program([("prefill", make(2)), ("decode", make(1))], out, BuildOptions(progress=False))
    x2 = np.concatenate([X, -X])
    with qnnrt.load(out) as prog:
        for method, x in (("prefill", x2), ("decode", X)):
            got = prog.run(method, {"x": x})
            ref = reference_outputs(make(len(x)), {"x": x})
            for k in ref:
                np.testing.assert_allclose(got[k], ref[k], rtol=2e-2, atol=2e-2)
            qnn_session(out / f"{method}.onnx").run(None, {"x": x})  # ONNX Runtime loads it too


def test_build_into_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, _ = CASES["input_is_output"]
    build_program([("forward", model)], ".", BuildOptions(progress=False))
    assert (tmp_path / "program.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_damaged_cache_entries_are_recompiled_and_replaced(tmp_path):
    model, _ = CASES["input_is_output"]
    opts = BuildOptions(progress=False, cache_dir=tmp_path / "cache")
    assert build_program([("forward", model)], tmp_path / "a", opts).cache_misses == 1
    (entry_bin,) = (tmp_path / "cache" / "contexts").glob("*/*/context.bin")
    data = bytearray(entry_bin.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different content
    entry_bin.write_bytes(bytes(data))
    r = build_program([("forward", model)], tmp_path / "b", opts)
    assert r.cache_misses == 1 and r.cache_hits == 0
    entry_bin.unlink()  # gone entirely
    assert build_program([("forward", model)], tmp_path / "c", opts).cache_misses == 1
    assert build_program([("forward", model)], tmp_path / "d", opts).cache_hits == 1  # repaired


def test_output_that_is_an_input_is_not_the_callers_array(tmp_path):
    model, _ = CASES["input_is_output"]
    build_program([("forward", model)], tmp_path / "p", BuildOptions(progress=False))
    x = X.copy()
    with qnnrt.load(tmp_path / "p") as prog:
        out = prog.run("forward", {"x": x})
    assert not np.shares_memory(out["x"], x)
    np.testing.assert_array_equal(out["x"], X)
