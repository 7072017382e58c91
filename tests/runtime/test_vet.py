"""Vetting through the API (qnnrt.load): a child reads, creates and (for cheap graphs) runs each
binary qnnrt did not write; only a step without progress for its stall timeout is a hang, and the
message names that step; modes are explicit."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import qnnrt
from qnnrt.errors import FormatError, QnnrtError
from qnnrt.loader import LoadOptions
from qnnrt.runtime.vet.policy import STEP_FILE_ENV, vet_mode
from tests.helpers.data import DATA

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QNNRT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(STEP_FILE_ENV, raising=False)
    return tmp_path / "cache"


def _report(path, **kw):
    with qnnrt.load(path, options=LoadOptions(**kw)) as p:
        (rep,) = p.vet_reports
        return rep


def test_progress_keeps_a_long_vetting_alive(chain12, cache, monkeypatch):
    """Each create step takes 1 s, the whole child far longer than the 3 s stall timeout: ok."""
    monkeypatch.setenv("QNNRT_VET_STALL_TIMEOUT", "3")
    monkeypatch.setenv("QNNRT_VET_TEST_DELAY", "create:1")
    seen = []
    rep = _report(chain12.model, vet_progress=lambda d, n: seen.append((d, n)))
    assert [r.verdict for r in rep.results] == ["ok"] * 12
    assert rep.children == 1 and rep.child_seconds > 3.0   # 4 distinct binaries, 1 s each at least
    assert seen[0] == (0, 4) and seen[-1] == (4, 4)         # equal bytes are vetted once


@pytest.mark.parametrize("stage, words", [
    ("create", "creating the context of"),
    ("execute", "once on zeros (graphExecute)"),
])
def test_a_step_without_progress_is_a_hang_naming_the_step(small_binary, cache, monkeypatch,
                                                           stage, words):
    monkeypatch.setenv("QNNRT_VET_STALL_TIMEOUT", "1")
    monkeypatch.setenv("QNNRT_VET_TEST_DELAY", f"{stage}:120")
    with pytest.raises(FormatError) as e:
        qnnrt.load(small_binary.path)
    msg = str(e.value)
    assert "no progress" in msg and words in msg and str(small_binary.path) in msg, msg
    assert "QNNRT_VET_STALL_TIMEOUT" in msg and "not a verdict on the binary" in msg
    assert "rebuild" not in msg.lower(), msg
    monkeypatch.delenv("QNNRT_VET_TEST_DELAY")
    assert _report(small_binary.path).results[0].verdict == "ok"   # a hang is never cached


@pytest.mark.slow
@pytest.mark.parametrize("case, step", [
    ("corrupt_delegate.pte", "reading the binary info of corrupt_delegate.pte:segment:1"),
    ("fuzz/bin_00041.bin", "reading the binary info of"),
    ("fuzz/pte_00002_create_crash.pte", "creating the context of pte_00002_create_crash.pte:segment:1"),
    ("fuzz/pte_00014_execute_crash.pte", "graph 'forward' of pte_00014_execute_crash.pte:segment:1 once on zeros"),
])
def test_a_crashing_binary_is_refused_naming_the_step(tmp_path, case, step):
    code = ("import qnnrt, sys\ntry:\n    qnnrt.load(sys.argv[1]).close()\nexcept qnnrt.QnnrtError as e:\n"
            "    print(type(e).__name__, e)\n")
    env = dict(os.environ, QNNRT_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    env.pop(STEP_FILE_ENV, None)
    r = subprocess.run([sys.executable, "-c", code, str(DATA / case)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, f"the API process died ({r.returncode}): {r.stderr[-800:]}"
    assert r.stdout.startswith("FormatError") and "crashed (SIGSEGV) while" in r.stdout, r.stdout
    assert step in r.stdout and "rebuild it" in r.stdout, r.stdout


def test_auto_runs_only_cheap_graphs_and_the_modes_say_what_runs(small_binary, cache, monkeypatch):
    assert _report(small_binary.path).to_json()["graphs_executed"] == 1     # 48 KB: cheap
    monkeypatch.setenv("QNNRT_CACHE_DIR", str(cache / "2"))
    monkeypatch.setenv("QNNRT_VET_EXECUTE_BYTES", "1000")
    rep = _report(small_binary.path)
    assert rep.mode == "auto" and rep.to_json()["graphs_executed"] == 0 and rep.children == 1
    assert _report(small_binary.path, vet="execute").to_json()["graphs_executed"] == 1
    assert _report(small_binary.path, vet="create").to_json()["graphs_executed"] == 0
    with qnnrt.load(small_binary.path, options=LoadOptions(vet=False)) as p:
        assert p.vet_reports == []
    with pytest.raises(QnnrtError, match="unknown vet mode 'everything'"):
        vet_mode("everything")


def test_worker_mode_without_a_parent_note_file_falls_back_to_the_child(small_binary, cache):
    rep = _report(small_binary.path, vet="worker")
    assert rep.mode == "auto" and rep.children == 1


def test_worker_mode_notes_steps_and_runs_watched_contexts_through_the_pool(
        chain12, cache, tmp_path, monkeypatch):
    note = tmp_path / "steps"
    note.write_text("")
    monkeypatch.setenv(STEP_FILE_ENV, str(note))
    import numpy as np
    x = np.linspace(-2, 2, 64, dtype=np.float32)[None]
    with qnnrt.load(chain12.model, residency="eager", options=LoadOptions(vet="worker")) as p:
        (rep,) = p.vet_reports
        assert rep.mode == "worker" and rep.children == 0
        assert rep.to_json()["watched_in_worker"] == 12
        assert p.pool.live_contexts(p.pool.live_keys) is None   # first runs go through acquire/release
        y = p.run(None, {"x": x})
        assert p.pool.live_contexts(p.pool.live_keys) is not None   # then the fast path
        np.testing.assert_allclose(y["t11"], chain12.reference(x), rtol=0.02, atol=0.02)
    assert note.read_text() == ""   # every noted step ended
