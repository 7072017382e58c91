"""`qnnrt plot`: a run report becomes a valid PNG, with or without its optional sections."""
from __future__ import annotations

import argparse
import json
import sys

import pytest

from qnnrt.errors import QnnrtError
from qnnrt.cli.plot import add_parser, plot_report, run_plot
from qnnrt.profiling.exec_profile import ExecutionProfiler
from qnnrt.profiling.heap import HeapProfiler

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def needs_matplotlib():
    return pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install -e '.[plot]')")


def full_report() -> dict:
    """A report shaped like the runner's, built from the real profilers' output."""
    ticks = iter(range(10_000))
    heap = HeapProfiler(clock=lambda: next(ticks) * 0.01)
    heap.dsp.mark_unsupported("DSP memory profiling refused with QNN error 1000 (x86 simulator)")
    live = []
    for it in range(2):                       # bounded, budget 2, 4 contexts, one failed create
        for i in range(4):
            name = f"ctx{i}"
            if len(live) == 2:
                victim = live.pop(0)
                heap.mark("evict", context=victim)
                heap.after_free(victim)
            heap.before_create(name)
            ok = not (it == 0 and i == 3)
            heap.after_create(name, ok, 10523136)
            if ok:
                live.append(name)
    for name in live:
        heap.after_free(name)
    heap.close()
    prof = ExecutionProfiler("basic")
    for it in range(5):
        for g in range(6):
            prof.record("execute", f"QNNExecutionProvider_graph_{g}_1_0", f"ctx{g % 4}",
                        [{"name": "QNN (execute) time", "type": 400, "unit": "us", "value": 100 * (g + 1) + it,
                          "sub": []},
                         {"name": "Accelerator (execute) time", "type": 3004, "unit": "us", "value": 80 * (g + 1),
                          "sub": []}], iteration=it)
    lat = [4.0 + 0.01 * i for i in range(50)]
    return {"method": "forward", "iterations": 50,
            "latency_ms": {"min": lat[0], "median": lat[25], "p90": lat[45], "max": lat[-1], "all": lat},
            "residency": {"policy": "bounded", "budget": 2}, "heap": heap.to_json(), "profile": prof.to_json()}


def assert_png(path: str) -> None:
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    import matplotlib.image as mpimg
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 300


def test_plot_full_report_makes_a_png(tmp_path):
    needs_matplotlib()
    report = tmp_path / "r.json"
    report.write_text(json.dumps(full_report()))
    out = plot_report(str(report))
    assert out == str(tmp_path / "r.png")
    assert_png(out)


def test_plot_with_sections_missing_still_draws(tmp_path):
    needs_matplotlib()
    for i, report in enumerate([{"method": "m"},
                                {"method": "m", "heap": {"timeline": []}, "profile": {"graphs": []},
                                 "latency_ms": {"median": 1.0}},
                                {"heap": "garbage", "profile": None, "latency_ms": [1, 2]}]):
        path = tmp_path / f"r{i}.json"
        path.write_text(json.dumps(report))
        out = plot_report(str(path), str(tmp_path / f"o{i}.png"))
        assert_png(out)


def test_cli_parser_and_run(tmp_path, capsys):
    needs_matplotlib()
    report = tmp_path / "r.json"
    report.write_text(json.dumps(full_report()))
    parser = argparse.ArgumentParser(prog="qnnrt")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["plot", str(report), "-o", str(tmp_path / "fig.png")])
    assert args.func(args) == 0
    assert "fig.png" in capsys.readouterr().out
    assert_png(str(tmp_path / "fig.png"))


def test_clear_errors_for_bad_inputs(tmp_path):
    needs_matplotlib()
    with pytest.raises(QnnrtError, match="does not exist"):
        plot_report(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(QnnrtError, match="not valid JSON"):
        plot_report(str(bad))
    good = tmp_path / "good.json"
    good.write_text("{}")
    with pytest.raises(QnnrtError, match="directory .* does not exist"):
        plot_report(str(good), str(tmp_path / "nodir" / "x.png"))


def test_missing_matplotlib_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)   # makes the import fail
    report = tmp_path / "r.json"
    report.write_text("{}")
    with pytest.raises(QnnrtError, match="needs matplotlib") as e:
        run_plot(argparse.Namespace(report=str(report), output=None))
    from qnnrt.install import extra_hint
    assert extra_hint("plot", "matplotlib") in str(e.value)
