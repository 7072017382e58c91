"""Vetting in the CLI: the worker is the isolation (no vetting child), a crash or a stall names the
binary and step, the progress line and the report say what vetting did."""
from __future__ import annotations

import json

import pytest

from tests.helpers.data import DATA, executorch_pte
from tests.helpers.cli_helpers import qnnrt

MANY = executorch_pte("many_4_fp16")   # 4 delegates, ExecuTorch-made


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QNNRT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.slow
@pytest.mark.parametrize("case, step", [
    ("corrupt_delegate.pte", "reading the binary info of corrupt_delegate.pte:segment:1"),
    ("fuzz/bin_00041.bin", "reading the binary info of"),   # (bin_00469 crashes only at times)
    ("fuzz/pte_00002_create_crash.pte", "creating the context of pte_00002_create_crash.pte:segment:1"),
    ("fuzz/pte_00014_execute_crash.pte", "graph 'forward' of pte_00014_execute_crash.pte:segment:1 for the first"),
])
def test_a_crash_in_the_worker_names_the_binary_and_step(cache, case, step):
    r = qnnrt("run", DATA / case)
    assert r.returncode == 1, r.stderr
    err = [x for x in r.stderr.strip().splitlines() if not x.startswith("note: no inputs")]
    assert len(err) == 1 and "crashed (SIGSEGV) while" in err[0] and step in err[0], r.stderr
    assert case.split("/")[-1] in err[0] and "rebuild it" in err[0]
    assert not (cache / "vet").exists()   # no vetting child ran (it would have cached a verdict)


@pytest.mark.slow
@pytest.mark.parametrize("stage, step", [("create", "creating the context of"),
                                         ("first-run", "for the first time")])
def test_a_stalled_step_in_the_worker_is_stopped_and_named(small_binary, cache, monkeypatch, stage,
                                                           step):
    monkeypatch.setenv("QNNRT_VET_STALL_TIMEOUT", "1")
    monkeypatch.setenv("QNNRT_VET_TEST_DELAY", f"{stage}:300")
    r = qnnrt("run", small_binary.path, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "no progress" in r.stderr and step in r.stderr, r.stderr
    assert str(small_binary.path) in r.stderr and "QNNRT_VET_STALL_TIMEOUT" in r.stderr
    assert "rebuild" not in r.stderr.lower()


@pytest.mark.slow
def test_report_and_summary_say_what_vetting_did(cache, tmp_path, monkeypatch):
    rep = tmp_path / "r.json"
    r = qnnrt("run", MANY, "--report", rep)
    assert r.returncode == 0, r.stderr
    v = json.loads(rep.read_text())["vetting"]
    assert v["mode"] == "worker" and v["watched_in_worker"] == 4 and v["children"] == 0, v
    assert "vetting worker: 4 binaries" in r.stdout
    r = qnnrt("run", MANY, "--report", rep, "--no-vet")
    assert json.loads(rep.read_text())["vetting"]["mode"] == "off"
    monkeypatch.setenv("QNNRT_NO_FORK", "1")   # in-process: the worker is not there, so a child
    r = qnnrt("run", MANY, "--report", rep)
    v = json.loads(rep.read_text())["vetting"]
    assert v["mode"] == "auto" and v["children"] == 1 and v["vetted_in_child"] == 4, v
    assert v["graphs_executed"] == 4    # tiny graphs: cheap to run, so run once on zeros there


@pytest.mark.slow
def test_progress_line_names_vetting(small_binary, cache, monkeypatch):
    monkeypatch.setenv("QNNRT_NO_FORK", "1")
    monkeypatch.setenv("QNNRT_PROGRESS_INTERVAL", "0.1")
    monkeypatch.setenv("QNNRT_VET_TEST_DELAY", "create:1")
    r = qnnrt("run", small_binary.path)
    assert r.returncode == 0, r.stderr
    assert "qnnrt run: loading: vetting 0/1 binaries in a child process" in r.stderr, r.stderr


@pytest.mark.slow
def test_progress_line_counts_graph_calls_as_they_happen(chain12, cache, monkeypatch):
    monkeypatch.setenv("QNNRT_PROGRESS_INTERVAL", "0.05")
    monkeypatch.setenv("QNNRT_VET_TEST_DELAY", "create:0.2")   # an iteration of 2.4 s on any machine
    r = qnnrt("run", chain12.model, "--residency", "sequential")
    assert r.returncode == 0, r.stderr
    counts = {int(line.split("graph call ")[1].split("/")[0]) for line in r.stderr.splitlines()
              if "graph call " in line}
    assert counts & set(range(1, 12)), r.stderr   # mid-iteration counts, not 0 until the end


def test_eager_beyond_the_pd_is_the_pd_error_not_a_vetting_error(chain_pd, cache):
    r = qnnrt("run", chain_pd.model, "--residency", "eager")
    assert r.returncode == 1
    assert "Failed to find available PD" in r.stderr and "protection-domain" in r.stderr
    assert "vetting" not in r.stderr and "no progress" not in r.stderr
