"""Programs under every residency policy, on real context binaries and the simulator."""
import json

import numpy as np
import pytest

import qnnrt
from qnnrt.errors import FormatError, InputError, QnnError, QnnrtError
from qnnrt.runtime.residency import Residency
from tests.helpers.program_fixtures import make_chain
from tests.helpers.qnn_fixtures import WIDTH, two_partitions_refs

TOL = dict(rtol=3e-2, atol=3e-2)
X = np.linspace(-2, 2, WIDTH, dtype=np.float32)[None]


def run_chain(model, residency, iterations=2, **options):
    with qnnrt.load(model, residency=residency, options=qnnrt.LoadOptions(**options)) as prog:
        outs = [prog.run(None, {"x": X}) for _ in range(iterations)]
        return outs, prog.pool.summary()


def test_residency_parse():
    assert Residency.parse("bounded:3").max_live == 3
    assert Residency.parse("bounded:2GB").max_bytes == 2 << 30
    assert Residency.parse("bounded:512mb").max_bytes == 512 << 20
    for bad in ("bounded:0", "bounded:x", "greedy", "bounded:1.5"):
        with pytest.raises(QnnrtError):
            Residency.parse(bad)


def test_method_specs(chain12):
    with qnnrt.load(chain12.model, residency="lazy") as prog:
        m = prog.methods["chain"]
        assert [(s.name, s.shape, s.dtype) for s in m.inputs] == [("x", (1, WIDTH), np.float32)]
        assert m.outputs[0].dtype == np.float32 and len(m.graph_order) == 12


@pytest.mark.parametrize("policy", ["eager", "sequential", "bounded:3", "bounded:35MB", "auto"])
def test_policies_match_lazy_bit_for_bit(chain12, policy):
    ref_outs, lazy = run_chain(chain12.model, "lazy")
    np.testing.assert_allclose(ref_outs[0]["t11"], chain12.reference(X), **TOL)
    assert lazy["creates"] == 12 and lazy["frees"] == 0 and lazy["peak_live"] == 12
    outs, s = run_chain(chain12.model, policy)
    for o in outs:
        np.testing.assert_array_equal(o["t11"], ref_outs[0]["t11"])
    if policy == "sequential":
        assert s["peak_live"] == 1 and s["creates"] == 24
    if policy.startswith("bounded"):
        assert s["peak_live"] <= 3 and s["evictions"] > 0 and s["creates"] > 12
        assert s["reloads"] == s["creates"] - 12
    if policy == "auto":
        assert s["creates"] == 12 and s["evictions"] == 0 and s["capacity_found"] is None


def test_bounded_prefetches(chain12):
    _, s = run_chain(chain12.model, "bounded:4", iterations=3)
    assert s["prefetches"] > 0 and s["prefetch_hits"] > 0


def test_pd_program_eager_fails_auto_completes(chain_pd, tmp_path):
    with pytest.raises(QnnError) as ei:
        qnnrt.load(chain_pd.model, residency="eager")
    assert ei.value.is_pd_exhaustion and "protection-domain" in str(ei.value)
    heap = tmp_path / "heap.txt"
    outs, s = run_chain(chain_pd.model, "auto", iterations=2, heap_profiling_path=str(heap),
                        max_pds=1)
    np.testing.assert_allclose(outs[0]["t399"], chain_pd.reference(X), **TOL)
    timeline = json.loads(heap.with_name("heap.txt.json").read_text())["timeline"]
    assert [e for e in timeline if e["event"] == "evict"]  # the decisions are on the timeline
    np.testing.assert_array_equal(outs[0]["t399"], outs[1]["t399"])
    assert s["pd_budget_source"] == "simulator" and s["create_failures"] == 0   # planned, never failed
    assert s["evictions"] > 0 and 100 < s["peak_live"] < 400


def test_pd_program_sequential_matches_auto(chain_pd):
    outs_auto, _ = run_chain(chain_pd.model, "auto", iterations=1)
    outs_seq, s = run_chain(chain_pd.model, "sequential", iterations=1)
    np.testing.assert_array_equal(outs_auto[0]["t399"], outs_seq[0]["t399"])
    assert s["peak_live"] == 1


def test_corrupt_binary_among_good_ones(tmp_path, distinct_binaries):
    """A truncated binary is found before any context is created, and the error names it."""
    chain = make_chain(tmp_path, distinct_binaries, 6, corrupt=3)
    for policy in ("eager", "lazy", "auto"):
        heap = tmp_path / f"heap_{policy}.txt"
        with pytest.raises(FormatError) as ei:
            qnnrt.load(chain.model, residency=policy,
                       options=qnnrt.LoadOptions(heap_profiling_path=str(heap)))
        assert "c003.bin" in str(ei.value) and "truncated" in str(ei.value)
        stats = json.loads(heap.with_name(heap.name + ".json").read_text())["stats"]
        assert stats["live"] == 0 and stats["creates"] == 0


def test_creation_failure_mid_load_leaks_nothing(chain_pd, tmp_path):
    """Eager creation of the 400-context program fails part-way (PD): every context created before
    the failure is freed, the heap counter ends at zero, and the error names the context."""
    heap = tmp_path / "heap.txt"
    with pytest.raises(QnnError) as ei:
        qnnrt.load(chain_pd.model, residency="eager",
                   options=qnnrt.LoadOptions(heap_profiling_path=str(heap)))
    assert ".bin" in str(ei.value)
    tl = json.loads(heap.with_name("heap.txt.json").read_text())
    assert tl["stats"]["live"] == 0 and tl["stats"]["failed_creates"] == 1
    assert tl["stats"]["creates"] == tl["stats"]["frees"] > 100
    assert len(heap.read_text().splitlines()) == 2


def test_wrong_inputs_then_program_still_works(chain12):
    with qnnrt.load(chain12.model) as prog:
        good = prog.run(None, {"x": X})
        with pytest.raises(InputError, match="shape"):
            prog.run(None, {"x": np.zeros((2, WIDTH), np.float32)})
        with pytest.raises(InputError, match="missing"):
            prog.run(None, {})
        with pytest.raises(InputError, match="unknown"):
            prog.run(None, {"x": X, "z": X})
        with pytest.raises(InputError, match="dtype"):
            prog.run(None, [X.astype(np.int64)])
        with pytest.raises(QnnrtError, match="no method"):
            prog.run("nope", [X])
        np.testing.assert_array_equal(prog.run(None, [X])["t11"], good["t11"])
    with pytest.raises(QnnrtError, match="closed"):
        prog.run(None, [X])


def test_two_methods_share_one_context_and_alternate(two_method_program):
    r1, r2 = two_partitions_refs(X)
    with qnnrt.load(two_method_program) as prog:
        assert list(prog.methods) == ["first", "second"]
        first = prog.run("first", [X])["y"]
        second = prog.run("second", [X])["y"]
        np.testing.assert_allclose(first, r1, **TOL)
        np.testing.assert_allclose(second, r2, **TOL)
        for i in range(100):
            name = ["first", "second", "second", "first"][i % 4]
            y = prog.run(name, [X])["y"]
            np.testing.assert_array_equal(y, first if name == "first" else second)
        s = prog.pool.summary()
        assert s["contexts_total"] == 1 and s["creates"] == 1


def test_heap_profile_lazy_and_bounded(chain12, tmp_path):
    for policy, more in (("lazy", False), ("bounded:3", True)):
        path = tmp_path / f"heap_{policy.replace(':', '_')}.txt"
        with qnnrt.load(chain12.model, residency=policy,
                        options=qnnrt.LoadOptions(heap_profiling_path=str(path))) as prog:
            prog.run(None, [X])
            prog.run(None, [X])
        lines = path.read_text().splitlines()
        assert len(lines) == 2
        assert lines[0].startswith("HOST:before_context_created (bytes), ")
        assert lines[1].startswith("HOST:after_context_freed (bytes), ")
        before, after = (int(l.rsplit(",", 1)[1]) for l in lines)
        assert after >= before > 0
        tl = json.loads(path.with_name(path.name + ".json").read_text())
        creates = [e["context"] for e in tl["timeline"] if e["event"] == "create"]
        frees = [e["context"] for e in tl["timeline"] if e["event"] == "free"]
        evicts = [e["context"] for e in tl["timeline"] if e["event"] == "evict"]
        if more:
            assert len(creates) > 12 and len(frees) == len(creates)
            assert len(evicts) == len(creates) - 3  # all but the last 3 live were evicted
        else:
            assert sorted(creates) == sorted(set(creates)) and len(creates) == 12
            assert sorted(frees) == sorted(creates)
        assert tl["sources"]["dsp"]["supported"] is False
        assert "not supported" in tl["sources"]["dsp"]["note"]
        assert tl["sources"]["pd_estimate"]["estimates"]


def test_program_folder_errors(tmp_path, two_method_program):
    import shutil
    bad = tmp_path / "p"
    shutil.copytree(two_method_program, bad)
    m = json.loads((bad / "program.json").read_text())
    m["contexts"][0]["path"] = "../../etc/passwd"
    (bad / "program.json").write_text(json.dumps(m))
    with pytest.raises(FormatError, match="outside|escape"):
        qnnrt.load(bad)
    (bad / "program.json").write_text("{not json")
    with pytest.raises(FormatError, match="JSON"):
        qnnrt.load(bad)
    with pytest.raises(FormatError):
        qnnrt.load(tmp_path / "does-not-exist")


def test_heap_report_explains_what_the_host_heap_holds_after_the_last_free(chain12, tmp_path):
    """After the last context is freed QNN still holds per-backend host memory until backendFree;
    the report gives the value after the backend is freed too, and says what is what."""
    heap = tmp_path / "heap.txt"
    with qnnrt.load(chain12.model, options=qnnrt.LoadOptions(heap_profiling_path=str(heap))) as prog:
        prog.run(None, {"x": X})
    rep = json.loads((tmp_path / "heap.txt.json").read_text())
    assert rep["file_prefix"] == "HOST"
    assert rep["after_backend_freed"] <= rep["after_context_freed"]
    assert "until the backend is freed" in rep["host_heap_note"]
    assert [e["event"] for e in rep["timeline"]][-1] == "backend_freed"
