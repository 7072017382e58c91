"""qnnrt build end to end, on the real QNN HTP simulator through ONNX Runtime's QNN EP."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qnnrt.compiler import demo
from qnnrt.compiler.builder import BuildOptions, build_program
from qnnrt.compiler.compile import qnn_session
from qnnrt.errors import BuildError
from qnnrt.formats.program import check_method_files, read_program

FP16_ATOL = 0.05      # logits are O(3); fp16 through 16 layers stays within ~0.02


def _ort_qnn_session(path):
    return qnn_session(path)


def _check_methods_against_reference(report):
    man = report.manifest
    for m in man.methods:
        ref_model = onnx.load(str(man.folder / man.build["reference"][m.name]))
        inputs = demo.demo_inputs(ref_model, seed=7)
        ref = demo.reference_outputs(ref_model, inputs)
        sess = _ort_qnn_session(m.path)
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, inputs)))
        assert set(got) == set(ref)
        for k in ref:
            err = float(np.abs(got[k] - ref[k]).max())
            assert err < FP16_ATOL, (m.name, k, err)


def _binary_graphs(path):
    from qnnrt.core import ContextBinary
    with ContextBinary(path) as cb:
        return [g.name for g in cb.graphs]


def test_tiny_program_layout(built_tiny_program):
    r = built_tiny_program
    assert r.partitions == 66 and r.binaries == 66
    man = read_program(r.out)
    assert [m.name for m in man.methods] == ["forward"]
    assert man.target == {"soc_model": 43, "htp_arch": 73}
    calls = check_method_files(man)
    assert len(calls["forward"]) == 66
    for c in man.contexts:
        assert _binary_graphs(c.file) == c.graphs
    model = onnx.load(str(man.method("forward").path))
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("EPContext") == 66 and ops.count("MatMul") == 113 and len(ops) == 66 + 113


def test_tiny_program_runs_in_ort_and_matches_reference(built_tiny_program):
    _check_methods_against_reference(built_tiny_program)


def test_two_method_program_holds_both_graphs_per_context(built_tiny_two_method_program):
    r = built_tiny_two_method_program
    man = r.manifest
    assert r.binaries == 66 and [m.name for m in man.methods] == ["prefill", "decode"]
    calls = check_method_files(man)
    for c in man.contexts:
        assert len(c.graphs) == 2 and _binary_graphs(c.file) == c.graphs
    for k, c in enumerate(man.contexts):     # partition k of each method lives in binary k
        assert calls["prefill"][k] == (c.name, c.graphs[0])
        assert calls["decode"][k] == (c.name, c.graphs[1])
    _check_methods_against_reference(r)


def test_grouped_two_method_program(built_tiny_grouped_program):
    r = built_tiny_grouped_program
    man = r.manifest
    assert r.binaries == 17
    assert [len(c.graphs) for c in man.contexts] == [8] * 16 + [4]
    for c in man.contexts:
        assert _binary_graphs(c.file) == c.graphs
    _check_methods_against_reference(r)


def test_rebuild_hits_the_cache(built_tiny_program, tmp_path):
    report = build_program([("forward", str(built_tiny_program.out / "reference" / "forward.onnx"))],
                           tmp_path / "again", BuildOptions(cpu_ops=("MatMul",), progress=False))
    assert report.cache_misses == 0 and report.cache_hits == 66
    assert [c.graphs for c in report.manifest.contexts] == [c.graphs for c in built_tiny_program.manifest.contexts]


def _model_with(op, cache_dir):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    b = onnx.numpy_helper.from_array(np.linspace(-1, 1, 8).astype(np.float32), "b")
    nodes = [helper.make_node("Add", ["x", "b"], ["t0"], name="add"),
             helper.make_node(op, ["t0"], ["t1"], name="odd"),
             helper.make_node("Mul", ["t1", "b"], ["y"], name="mul")]
    m = helper.make_model(helper.make_graph(nodes, "m", [x], [y], [b]), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def test_probe_puts_ops_qnn_rejects_on_the_cpu(tmp_path):
    m = _model_with("Sinh", tmp_path)       # the QNN HTP EP does not take Sinh
    r = build_program([("forward", m)], tmp_path / "p", BuildOptions(progress=False, cache_dir=tmp_path / "c"))
    assert r.partitions == 2 and r.cpu_reasons == {"QNN EP rejects": 1}
    sess = _ort_qnn_session(r.manifest.method("forward").path)
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    b = np.linspace(-1, 1, 8).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.sinh(x + b) * b, atol=2e-2)


def test_unsupported_op_forced_onto_htp_is_a_clear_error(tmp_path):
    m = _model_with("Sinh", tmp_path)
    with pytest.raises(BuildError, match=r"(?s)cannot compile partition 0 .*ops: .*Sinh.*--cpu-ops"):
        build_program([("forward", m)], tmp_path / "p",
                      BuildOptions(probe=False, progress=False, cache_dir=tmp_path / "c"))
    assert not (tmp_path / "p").exists()


def test_methods_with_different_structure_are_rejected(tmp_path):
    a = demo.make_decoder(demo.PRESETS["tiny"])
    b = demo.make_decoder(demo.DemoConfig("x", layers=2, hidden=64, heads=2, head_dim=32, ffn=128, vocab=128, seq=1))
    with pytest.raises(BuildError, match="same partition structure"):
        build_program([("prefill", a), ("decode", b)], tmp_path / "p",
                      BuildOptions(cpu_ops=("MatMul",), progress=False))


def test_refuses_to_overwrite_a_foreign_folder(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(BuildError, match="not empty"):
        build_program([("forward", _model_with("Relu", tmp_path))], tmp_path, BuildOptions(progress=False))


def test_cli_build_demo(tmp_path, capsys, monkeypatch):
    from qnnrt.cli.main import main
    monkeypatch.setenv("QNNRT_NO_FORK", "1")
    assert main(["build", "--demo", "tiny", "--cpu-ops", "MatMul", "-o", str(tmp_path / "x"),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "partitions  66" in out and "binaries    66" in out
    assert main(["build", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "z")]) == 1
