"""`qnnrt run` on programs: methods, residency, --check-repeat, the report, profiling files, plot."""
import json

import pytest

from tests.helpers.cli_helpers import qnnrt
from tests.helpers.qnn_fixtures import WIDTH

REPORT_KEYS = {"method", "iterations", "warm_up", "load_s", "first_output_s", "latency_ms",
               "residency", "outputs"}


@pytest.mark.slow
def test_run_program_report_fields(chain12, tmp_path):
    rep = tmp_path / "r.json"
    r = qnnrt("run", chain12.model, "--residency", "bounded:3", "--iteration", 4, "--warm-up", 1,
              "--check-repeat", "--report", rep)
    assert r.returncode == 0, r.stderr
    d = json.loads(rep.read_text())
    assert REPORT_KEYS <= set(d)
    assert set(d["latency_ms"]) >= {"min", "median", "p90", "max", "all"}
    assert len(d["latency_ms"]["all"]) == 4
    res = d["residency"]
    assert {"policy", "contexts_total", "peak_live", "creates", "evictions",
            "capacity_found"} <= set(res)
    assert res["policy"] == "bounded:3" and res["contexts_total"] == 12 and res["peak_live"] <= 3
    # what the program costs in PD: all contexts vs. what bounded:3 kept live at most
    est = res["pd_estimate_bytes"]
    assert len(est) == 12 and min(est.values()) > 10 << 20
    assert res["pd_estimate_total_bytes"] == sum(est.values())
    assert 0 < res["pd_peak_bytes"] <= 3 * max(est.values())
    assert "PD (accelerator address space" in r.stdout
    assert d["outputs"] == [{"name": "t11", "dtype": "float32", "shape": [1, WIDTH]}]
    assert "residency bounded:3" in r.stdout and "check-repeat: 0" in r.stdout


@pytest.mark.slow
def test_run_two_methods_by_name_and_index(two_method_program, tmp_path):
    for sel in (["--method", "second"], ["--method-index", "1"]):
        rep = tmp_path / "r.json"
        r = qnnrt("run", two_method_program, *sel, "--iteration", 3, "--report", rep)
        assert r.returncode == 0, r.stderr
        assert json.loads(rep.read_text())["method"] == "second"
    r = qnnrt("run", two_method_program, "--method", "third")
    assert r.returncode == 1 and "no method 'third'" in r.stderr
    r = qnnrt("run", two_method_program, "--method-index", "5")
    assert r.returncode == 1 and "out of range" in r.stderr


def test_pd_program_eager_fails_auto_runs(chain_pd, tmp_path):
    r = qnnrt("run", chain_pd.model, "--residency", "eager")
    assert r.returncode == 1
    assert "Failed to find available PD" in r.stderr and "protection-domain" in r.stderr
    rep = tmp_path / "r.json"
    r = qnnrt("run", chain_pd.model, "--iteration", 2, "--check-repeat", "--report", rep,
              "--max-pds", 1)
    assert r.returncode == 0, r.stderr
    res = json.loads(rep.read_text())["residency"]
    assert res["evictions"] > 0 and res["create_failures"] == 0
    assert res["pd_budget_source"] == "simulator"


@pytest.mark.slow
def test_profiling_files_and_plot(chain12, tmp_path):
    pytest.importorskip("matplotlib")
    heap, prof, rep = tmp_path / "heap.txt", tmp_path / "prof.json", tmp_path / "r.json"
    r = qnnrt("run", chain12.model, "--iteration", 2, "--heap-profiling-path", heap,
              "--profile-level", "detailed", "--profile-path", prof, "--report", rep)
    assert r.returncode == 0, r.stderr
    assert heap.read_text().startswith("HOST:before_context_created (bytes), ")
    assert (tmp_path / "heap.txt.json").is_file() and prof.is_file()
    assert prof.with_suffix(".csv").is_file()
    d = json.loads(rep.read_text())
    graphs = d["profile"]["graphs"]
    assert len(graphs) == 12 and all(g["executions"] == 2 for g in graphs)
    png = tmp_path / "r.png"
    r = qnnrt("plot", rep, "-o", png)
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.parametrize("args,pattern", [
    (["--residency", "bounded:0"], "K must be"),
    (["--residency", "greedy"], "unknown residency"),
    (["--iteration", "0"], "--iteration"),
    (["--report", "/no/such/dir/r.json"], "does not exist"),
    (["--heap-profiling-path", "/no/such/dir/h.txt"], "does not exist"),
])
def test_bad_runner_options(chain12, args, pattern):
    r = qnnrt("run", chain12.model, *args)
    assert r.returncode == 1 and pattern in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("iterations, sampled", [(20, 20), (40, 15)])
def test_run_reports_time_breakdown(chain12, tmp_path, iterations, sampled):
    """Up to 31 iterations every one is timed step by step; beyond, a sample (1 in 2 of 40, in
    bursts of 4 whose first is not counted: 5 x 3), the others untimed with outputs bit-identical
    to the timed first iteration's."""
    rep = tmp_path / "r.json"
    r = qnnrt("run", chain12.model, "--iteration", iterations, "--warm-up", 2, "--check-repeat",
              "--report", rep)
    assert r.returncode == 0, r.stderr
    d = json.loads(rep.read_text())
    tb = d["time_breakdown"]
    assert {"accelerator_ms", "cpu_ops_ms", "runtime_ms", "runtime_us_per_graph_call"} <= set(tb)
    assert tb["accelerator_ms"] > 0 and tb["cpu_ops_ms"] > 0 and tb["runtime_ms"] > 0
    assert tb["sampled_iterations"] == sampled and tb["sample_every"] == (1 if sampled == 20 else 2)
    med = d["latency_ms"]["median"]
    total = tb["accelerator_ms"] + tb["cpu_ops_ms"] + tb["runtime_ms"]
    assert abs(total - med) <= 0.05 * med, (total, med)
    assert abs(tb["runtime_us_per_graph_call"] - tb["runtime_ms"] * 1e3 / 12) < 0.5 * tb["runtime_us_per_graph_call"]
    assert "inside QNN graph execution" in r.stdout and "us per graph call" in r.stdout
    assert d["check_repeat"]["mismatches"] == 0 and len(d["latency_ms"]["all"]) == iterations
    if sampled < iterations:
        assert "1 in 2" in tb["how"] and "of 15 sampled, 1 in 2 timed step by step" in r.stdout


def test_time_breakdown_sampling():
    """The sample: its stride, bursts of 4 whose first is not counted, the medians of the rest."""
    from qnnrt.cli.run_common import breakdown_sample, breakdown_stride, time_breakdown
    assert [breakdown_stride(n) for n in (1, 31, 32, 300, 10_000)] == [1, 1, 2, 16, 16]
    assert [breakdown_sample(j, 1) for j in range(3)] == [(True, True)] * 3
    picks = [breakdown_sample(j, 16) for j in range(300)]
    assert [j for j, (run, _) in enumerate(picks) if run][:8] == [0, 1, 2, 3, 64, 65, 66, 67]
    assert sum(run for run, _ in picks) == 20 and sum(c for _, c in picks) == 15
    parts = [(0.010, 0.006, 0.002, 4), (0.012, 0.007, 0.003, 4), (0.011, 0.006, 0.002, 4)]
    tb = time_breakdown(parts, 16)
    assert tb["runtime_ms"] == pytest.approx(2.0) and tb["sampled_iterations"] == 3
    assert tb["runtime_us_per_graph_call"] == pytest.approx(500.0) and "1 in 16" in tb["how"]
    assert time_breakdown([], 4) == {}
