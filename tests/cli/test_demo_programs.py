"""The builder's demo programs on the runtime: accuracy against the float32 reference, every
residency policy, two methods sharing contexts, and the PD-exceeding `pd` program."""
import numpy as np
import onnx
import pytest

import qnnrt
from qnnrt.compiler.demo import demo_inputs, reference_outputs
from qnnrt.errors import QnnError
from tests.helpers.cli_helpers import qnnrt as qnnrt_cli

FP16 = 0.05  # logits up to ~3.4; measured error ~0.017


def _ref(program, method="forward", seed=0):
    model = onnx.load(str(program / "reference" / f"{method}.onnx"))
    inputs = demo_inputs(model, seed)
    return inputs, reference_outputs(model, inputs)


def _max_err(out, ref):
    return max(float(np.abs(out[k] - ref[k]).max()) for k in ref)


@pytest.fixture(scope="module")
def tiny(built_tiny_program):
    prog = built_tiny_program.out
    inputs, ref = _ref(prog)
    with qnnrt.load(prog, residency="lazy") as p:
        lazy = p.run("forward", inputs)
    return prog, inputs, ref, lazy


def test_tiny_has_66_contexts_and_matches_reference(tiny):
    prog, inputs, ref, lazy = tiny
    assert _max_err(lazy, ref) < FP16
    with qnnrt.load(prog) as p:
        assert len(p.binaries) == 66 and len(p.method().graph_order) == 66
        out = p.run("forward", inputs)
    for k in out:
        np.testing.assert_array_equal(out[k], lazy[k])


def test_tiny_matches_onnxruntime_on_the_same_method_file(tiny):
    from qnnrt.compiler.compile import qnn_session
    prog, inputs, _, lazy = tiny
    sess = qnn_session(prog / "forward.onnx")
    names = [o.name for o in sess.get_outputs()]
    for name, y in zip(names, sess.run(names, inputs)):
        np.testing.assert_allclose(lazy[name], y, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("policy", ["sequential", "bounded:16", "bounded:200MB"])
def test_tiny_policies_bit_for_bit(tiny, policy):
    prog, inputs, _, lazy = tiny
    with qnnrt.load(prog, residency=policy) as p:
        out = p.run("forward", inputs)
        s = p.pool.summary()
    for k in out:
        np.testing.assert_array_equal(out[k], lazy[k])
    assert s["peak_live"] <= (1 if policy == "sequential" else 20)


def test_two_method_program_interleaved(built_tiny_two_method_program):
    prog = built_tiny_two_method_program.out
    feeds, refs = {}, {}
    for m in ("prefill", "decode"):
        feeds[m], refs[m] = _ref(prog, m)
    with qnnrt.load(prog) as p:
        assert set(p.methods) == {"prefill", "decode"} and len(p.binaries) == 66
        first = {}
        for m in ("prefill", "decode", "decode", "prefill", "decode"):
            out = p.run(m, feeds[m])
            if m not in first:
                first[m] = out
                assert _max_err(out, refs[m]) < FP16, m
            for k in out:
                np.testing.assert_array_equal(out[k], first[m][k])
        assert p.pool.summary()["creates"] == 66  # shared contexts created once


def test_grouped_program(built_tiny_grouped_program):
    prog = built_tiny_grouped_program.out
    with qnnrt.load(prog, residency="bounded:4") as p:
        assert len(p.binaries) == 17
        for m in ("decode", "prefill"):
            inputs, ref = _ref(prog, m)
            assert _max_err(p.run(m, inputs), ref) < FP16


def test_pd_program_eager_fails_auto_matches_reference(built_pd_program):
    prog = built_pd_program.out
    with pytest.raises(QnnError) as ei:
        qnnrt.load(prog, residency="eager")
    assert ei.value.is_pd_exhaustion
    inputs, ref = _ref(prog)
    with qnnrt.load(prog, options=qnnrt.LoadOptions(max_pds=1)) as p:  # one PD: evictions
        out = p.run("forward", inputs)
        s = p.pool.summary()
    assert _max_err(out, ref) < FP16
    assert s["evictions"] > 0 and s["create_failures"] == 0 and s["contexts_total"] == 402


def test_demo_command(built_tiny_program, tmp_path):
    r = qnnrt_cli("demo", "--iteration", "1", "--output-dir", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "66 context binaries" in r.stdout and "accuracy" in r.stdout
    err = float(r.stdout.split("reference| = ")[1].split()[0])
    assert err < FP16
    assert (tmp_path / "heap.txt").is_file() and (tmp_path / "output_0_0.raw").is_file()
