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


# -- what the figure shows (its artists, not its pixels) -------------------------------------------
def multi_pd_report(pds: int = 3) -> dict:
    """A multi-PD report as `qnnrt run` writes it: PD 0's heap report with each worker's under
    `processes`, a profile of context files with one hash-named graph each."""
    reports = []
    for pd in range(pds):
        ticks = iter(range(10_000))
        heap = HeapProfiler(clock=lambda ticks=ticks: next(ticks) * 0.01)
        heap.dsp.mark_unsupported("DSP memory profiling is not supported by this backend (QNN error 1000 on "
                                  "context creation with HTP context config option 4; the x86 simulator "
                                  "refuses it, devices support it); host heap values are reported instead")
        for i in range(3):
            heap.before_create(f"contexts/c{pd}{i}.bin")
            heap.after_create(f"contexts/c{pd}{i}.bin", True, 10523136)
        for i in range(3):
            heap.after_free(f"contexts/c{pd}{i}.bin")
        heap.close()
        reports.append(heap.to_json())
    main = reports[0]
    main["processes"] = {f"pd{i}": r for i, r in enumerate(reports) if i}
    prof = ExecutionProfiler("basic")
    for c in range(4):
        prof.record("execute", f"QNNExecutionProvider_QNN_16274589000488852_{c}_0", f"contexts/ctx_{c:03d}.bin",
                    [{"name": "QNN (execute) time", "type": 400, "unit": "us", "value": 100 * (c + 1), "sub": []}])
    lat = [4.0, 4.1, 4.3]
    return {"path": "prog", "method": "forward", "iterations": 3, "heap": main, "profile": prof.to_json(),
            "latency_ms": {"min": 4.0, "median": 4.1, "p90": 4.3, "max": 4.3, "all": lat},
            "residency": {"policy": "multi-pd:3", "pds": pds}}


def _drawn(report: dict):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from qnnrt.cli.plot import build_figure
    fig = build_figure(report)
    FigureCanvasAgg(fig).draw()    # lays out: legends and ticks are where a PNG has them
    return fig


def test_a_multi_pd_report_draws_every_pds_heap_timeline():
    needs_matplotlib()
    fig = _drawn(multi_pd_report(3))
    titles = [ax.get_title() for ax in fig.axes]
    for pd, who in ((0, "this process"), (1, "worker process"), (2, "worker process")):
        assert any(f"PD {pd} ({who})" in t for t in titles), titles
    series = {line.get_gid() for ax in fig.axes for line in ax.get_lines() if line.get_gid()}
    for pd, who in ((0, "this process"), (1, "worker process"), (2, "worker process")):
        for name in ("host malloc in use", "PD in use (QNN estimate)", "live contexts"):
            assert f"PD {pd} ({who}): {name}" in series, series
    live = [line for ax in fig.axes for line in ax.get_lines() if (line.get_gid() or "").endswith("live contexts")]
    assert all(max(line.get_ydata()) == 3 for line in live)
    assert "PD 2 (this process)" not in " ".join(titles)


def test_pd_0s_panel_shows_its_own_checkpoints_and_the_sum_apart():
    needs_matplotlib()
    report = multi_pd_report(2)
    heap = report["heap"]
    own_b, own_a = heap["before_context_created"], heap["after_context_freed"]
    worker = heap["processes"]["pd1"]
    heap["this_process"] = {"before_context_created": own_b, "after_context_freed": own_a}
    heap["before_context_created"] = own_b + worker["before_context_created"]   # as heap.py sums them
    heap["after_context_freed"] = own_a + worker["after_context_freed"]
    title = next(ax.get_title() for ax in _drawn(report).axes if "PD 0 (this process)" in ax.get_title())
    own_line, sum_line = title.splitlines()[1:3]
    assert own_line.startswith("HOST: ") and f"before {own_b / 2**20:.2f} MiB" in own_line
    assert sum_line.startswith("HOST, every PD summed: ")
    assert f"before {heap['before_context_created'] / 2**20:.2f} MiB" in sum_line


def test_legends_sit_outside_the_data_and_count_ticks_are_whole():
    needs_matplotlib()
    fig = _drawn(multi_pd_report(2))
    renderer = fig.canvas.get_renderer()
    legends = [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) >= 4     # each heap panel, the latency and the graph panel
    for ax, leg in legends:
        box, area = leg.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert box.x0 >= area.x1, (ax.get_title(), box, area)    # right of the axes
    counts = [ax for ax in fig.axes if ax.get_ylabel() in ("live contexts", "iterations")]
    assert len(counts) == 3
    for ax in counts:
        assert all(float(v).is_integer() for v in ax.get_yticks()), ax.get_yticks()


def test_graph_bars_name_context_files_and_notes_are_whole():
    needs_matplotlib()
    report = multi_pd_report(1)
    fig = _drawn(report)
    bars = next(ax for ax in fig.axes if ax.get_title().startswith("Per-graph"))
    assert sorted(t.get_text() for t in bars.get_yticklabels()) == [f"ctx_{c:03d}.bin" for c in range(4)]
    note = report["heap"]["sources"]["dsp"]["note"]
    xlabels = " ".join(ax.get_xlabel() for ax in fig.axes)
    assert " ".join(note.split()) in " ".join(xlabels.split())   # wrapped, every word kept
    from qnnrt.cli.plot import graph_labels
    assert graph_labels([{"context": "a.bin", "graph": "g1"}, {"context": "a.bin", "graph": "g2"}]) == \
        ["a.bin: g1", "a.bin: g2"]


def test_a_json_file_that_is_not_a_run_report_is_one_clear_error(tmp_path):
    needs_matplotlib()
    heap = multi_pd_report(1)["heap"]
    for name, data, what in (("heap.txt.json", heap, "heap profile's timeline"),
                             ("t.json", {"traceEvents": []}, "trace"),
                             ("x.json", {"a": 1}, "none of a report's sections")):
        path = tmp_path / name
        path.write_text(json.dumps(data))
        with pytest.raises(QnnrtError, match=what):
            plot_report(str(path))
    from tests.helpers.cli_helpers import qnnrt
    r = qnnrt("plot", tmp_path / "heap.txt.json")
    assert r.returncode == 1 and not (tmp_path / "heap.txt.png").exists()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a qnnrt run report" in lines[0] and "--report" in lines[0], r.stderr
