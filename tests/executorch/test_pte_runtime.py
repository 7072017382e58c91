"""ExecuTorch .pte files through qnnrt.load / qnnrt run: the same runtime as qnnrt's own programs."""
import json

import numpy as np
import pytest

import qnnrt
from qnnrt.errors import FormatError, QnnError
from tests.helpers.data import EXECUTORCH
from tests.helpers.cli_helpers import qnnrt as qnnrt_cli
from tests.helpers.pte_writer import chain_pte
from tests.helpers.qnn_fixtures import WIDTH

FIXTURES = EXECUTORCH
TOLERANCE = {"add_relu_mul_fp16": 0.01, "add_relu_mul_q8": 0.06, "conv_linear_fp16": 0.01,
             "conv_linear_q8": 0.02, "many_4_fp16": 0.01, "two_methods_fp16": 0.03}


def _check(prog, folder, method):
    m = prog.methods[method]
    xs = [np.load(folder / f"{method}_input_{i}.npy") for i in range(len(m.inputs))]
    outs = prog.run(method, xs)
    for i, (name, y) in enumerate(outs.items()):
        ref = np.load(folder / f"{method}_ref_{i}.npy")
        assert y.shape == ref.shape
        assert float(np.abs(y - ref).max()) <= TOLERANCE[folder.name], (method, name)
    return outs


@pytest.mark.parametrize("name", sorted(TOLERANCE))
@pytest.mark.parametrize("residency", ["auto", "sequential"])
def test_fixture_through_load(name, residency):
    folder = FIXTURES / name
    with qnnrt.load(folder / "model.pte", residency=residency) as prog:
        for method in prog.methods:
            _check(prog, folder, method)
        s = prog.pool.summary()
        if name == "two_methods_fp16":
            assert s["contexts_total"] == 1  # one shared delegate blob -> one context
        if residency == "auto":
            assert s["creates"] == s["contexts_total"]


def test_two_methods_interleaved_100_iterations():
    folder = FIXTURES / "two_methods_fp16"
    with qnnrt.load(folder / "model.pte") as prog:
        first = {m: _check(prog, folder, m) for m in ("prefill", "decode")}
        feeds = {m: [np.load(folder / f"{m}_input_0.npy")] for m in first}
        for i in range(100):
            m = ("prefill", "decode", "decode", "prefill")[i % 4]
            out = prog.run(m, feeds[m])
            for k in out:
                np.testing.assert_array_equal(out[k], first[m][k])
        assert prog.pool.summary()["creates"] == 1


@pytest.mark.slow
def test_pte_runner_cli_and_inspect(tmp_path):
    folder = FIXTURES / "many_4_fp16"
    rep = tmp_path / "r.json"
    r = qnnrt_cli("run", folder / "model.pte", "--inputs", folder / "forward_input_0.npy",
                  "--iteration", 3, "--check-repeat", "--residency", "bounded:2",
                  "--output-dir", tmp_path / "out", "--report", rep,
                  "--heap-profiling-path", tmp_path / "heap.txt", "--profile-level", "basic")
    assert r.returncode == 0, r.stderr
    y = np.fromfile(tmp_path / "out" / "output_2_0.raw", np.float32)
    ref = np.load(folder / "forward_ref_0.npy").ravel()
    assert float(np.abs(y - ref).max()) <= TOLERANCE["many_4_fp16"]
    d = json.loads(rep.read_text())
    assert d["residency"]["peak_live"] <= 2 and d["residency"]["evictions"] > 0
    assert len(d["profile"]["graphs"]) == 4
    assert len((tmp_path / "heap.txt").read_text().splitlines()) == 2
    r = qnnrt_cli("inspect", folder / "model.pte")
    assert r.returncode == 0 and "aten::mm.out x4" in r.stdout and "segment:4" in r.stdout
    r = qnnrt_cli("inspect", folder / "model.pte", "--json")
    assert len(json.loads(r.stdout)["contexts"]) == 4


@pytest.mark.slow
def test_pte_beyond_pd_budget_runs_under_auto_eager_fails(tmp_path, small_binary):
    # 400 delegates, each its own context: more than the simulator's PD holds at once
    pte = chain_pte(tmp_path / "pd.pte", small_binary.path.read_bytes(), 400, WIDTH)
    with pytest.raises(QnnError) as ei:
        qnnrt.load(pte, residency="eager")
    assert ei.value.is_pd_exhaustion
    x = np.linspace(-1, 1, WIDTH, dtype=np.float32)[None]
    with qnnrt.load(pte, options=qnnrt.LoadOptions(max_pds=1)) as prog:  # one PD: evictions
        y1 = prog.run(None, [x])
        y2 = prog.run(None, [x])
        s = prog.pool.summary()
    assert s["evictions"] > 0 and s["create_failures"] == 0 and s["contexts_total"] == 400
    for k in y1:
        np.testing.assert_array_equal(y1[k], y2[k])
    r = qnnrt_cli("run", pte, "--residency", "eager")
    assert r.returncode == 1 and "Failed to find available PD" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncate", "identifier"])
def test_bad_pte_files(tmp_path, damage):
    data = (FIXTURES / "add_relu_mul_fp16" / "model.pte").read_bytes()
    p = tmp_path / "bad.pte"
    p.write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:4] + b"XX99" + data[8:])
    with pytest.raises(FormatError):
        qnnrt.load(p)
    r = qnnrt_cli("run", p)
    assert r.returncode == 1 and "bad.pte" in r.stderr


def test_mutable_buffer_delegates_are_refused_clearly(tmp_path):
    """ExecuTorch's mutable buffers (graph tensors named mutbuf_*) are state qnnrt does not keep:
    the load says so instead of failing mid-run."""
    from tests.helpers.qnn_fixtures import add_relu_mul, compile_models
    m = add_relu_mul(name="mutbuf")
    for n in m.graph.node:
        n.input[:] = ["mutbuf_0_x" if t == "x" else t for t in n.input]
    m.graph.input[0].name = "mutbuf_0_x"
    built = compile_models([m], ["mutbuf"], tmp_path)
    pte = chain_pte(tmp_path / "m.pte", built.path.read_bytes(), 1, WIDTH)
    with pytest.raises(FormatError, match="mutable buffers"):
        qnnrt.load(pte)


def test_frees_that_free_nothing_are_dropped_from_a_plan():
    """A free of a slot the template holds and no step writes, and the frees after the last
    other step (not of an output), free nothing: the plan drops them; every other free stays."""
    from qnnrt.executorch.plan import needed_frees
    from qnnrt.executorch.steps import FreeStep, MoveStep
    held = np.zeros(2)
    template = [held, None, held, None, None]
    m1, m2 = MoveStep(1, 2), MoveStep(2, 3)
    f0, f1, f2, f3, f4 = (FreeStep(i) for i in range(5))
    assert needed_frees([m1, f0, f1, m2, f2, f4, f3], template, [3]) == [m1, f1, m2, f2, f4, f3]
    assert needed_frees([m1, f0, f1, m2, f2, f4], template, [3]) == [m1, f1, m2]
    assert needed_frees([f0, f1], template, []) == []
