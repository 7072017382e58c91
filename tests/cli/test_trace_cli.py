"""`--trace` through the CLI (no terminal: progress lines on) and the demo's `next:` hint run as it
is printed: the trace of a multi-PD run, the plot of the hinted report with every panel drawn."""
from __future__ import annotations

import json
import shlex

import pytest

from tests.helpers.cli_helpers import qnnrt
from tests.helpers.data import executorch_pte
from tests.helpers.trace_check import check_trace

MULTI = ("--residency", "multi-pd:2", "--pd-budget", "64MiB")   # PD 0 here, 1 worker


def test_run_trace_of_a_multi_pd_run(chain12, tmp_path, monkeypatch):
    monkeypatch.setenv("QNNRT_PROGRESS_INTERVAL", "0.2")
    trace, rep = tmp_path / "t.json", tmp_path / "r.json"
    r = qnnrt("run", chain12.model, *MULTI, "--iteration", 3, "--warm-up", 1, "--report", rep, "--trace", trace,
              "--heap-profiling-path", tmp_path / "heap.txt", "--profile-level", "basic")
    assert r.returncode == 0, r.stderr
    assert f"trace: {trace} (" in r.stdout and "process track(s)" in r.stdout
    t = check_trace(trace)
    res = json.loads(rep.read_text())["residency"]
    local, remote = res["pd_workers"]
    assert set(t.processes) == {local["pid"], remote["pid"]}
    assert len(t.of("graph", remote["pid"])) == remote["graph_calls"] == 4 * 6
    assert len(t.of("graph", local["pid"])) == 4 * 6
    for g in t.of("graph"):    # profiled: QNN's figures on each call
        assert g["args"]["qnn_us"] > 0
    for w in (local, remote):
        assert max(t.counter("PD in use (bytes, QNN's reservations)", "pd_bytes", w["pid"])) == w["pd_reported_bytes"]
        assert len([c for c in t.of("context", w["pid"]) if c["name"].startswith("create")]) == w["creates"]


def test_a_trace_path_that_cannot_be_written_fails_before_the_load(chain12, tmp_path):
    r = qnnrt("run", chain12.model, "--trace", tmp_path / "missing" / "t.json")
    assert r.returncode == 1 and "trace" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_the_demos_next_commands_fill_every_panel(built_tiny_program, tmp_path, monkeypatch):
    """`qnnrt demo` ends with the commands to run next: run exactly those (in a fresh folder); the
    plot they make draws every panel, and the demo's folder inspects with its SoC and I/O."""
    from qnnrt.cli.plot import build_figure
    monkeypatch.setenv("QNNRT_PROGRESS_INTERVAL", "0.2")
    r = qnnrt("demo", "--iteration", "1", "--output-dir", tmp_path / "out", "--trace", tmp_path / "demo.json")
    assert r.returncode == 0, r.stderr
    check_trace(tmp_path / "demo.json")
    hint = next(line for line in r.stdout.splitlines() if line.startswith("next: "))[len("next: "):]
    commands = [shlex.split(c) for c in hint.split("&&")]
    assert [c[:2] for c in commands] == [["qnnrt", "run"], ["qnnrt", "plot"]]
    for c in commands:
        done = qnnrt(*c[1:], cwd=str(tmp_path))
        assert done.returncode == 0, (c, done.stderr)
    assert (tmp_path / "r.png").is_file() and (tmp_path / "trace.json").is_file()
    fig = build_figure(json.loads((tmp_path / "r.json").read_text()))
    notes = [t.get_text() for ax in fig.axes for t in ax.texts if "in this report" in t.get_text()]
    assert not notes, notes                       # every panel has its data
    titles = [ax.get_title() for ax in fig.axes]
    assert any(t.startswith("Heap") for t in titles) and any(t.startswith("Per-graph") for t in titles)
    program = commands[0][2]
    shown = qnnrt("inspect", program)
    assert shown.returncode == 0 and "SoC SM8550 (model 43), HTP v73" in shown.stdout
    assert "66 graph(s)" in shown.stdout and "input " in shown.stdout


def test_no_trace_after_an_input_refused_before_any_work(tmp_path):
    r = qnnrt("run", executorch_pte("add_relu_mul_fp16"), "--inputs", tmp_path / "missing.npy",
              "--trace", tmp_path / "t.json")
    assert r.returncode == 1 and "does not exist" in r.stderr
    assert not (tmp_path / "t.json").exists() and "trace:" not in r.stdout
