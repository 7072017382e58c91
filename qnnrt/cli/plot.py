"""`qnnrt plot REPORT.json`: one figure of a run report (`qnnrt run / llm / serve --report`).

Panels: the heap timeline across the context lifecycle of every process that held contexts (this
one and each PD worker of a multi-PD run, on one time axis: per source, creates / frees / evictions
marked, the live-context count), the per-iteration latency histogram, and the per-graph QNN time
bars named by context file. A report from a run without some profiling has sections missing; their
panel then says what flag would fill it. A JSON file that is not a run report (a heap profile's
timeline, a trace) is an error that says what it is. matplotlib is an optional extra, imported only
here, through the object API (no pyplot global state, no GUI backend).
"""
from __future__ import annotations

import argparse
import os
import textwrap
from typing import Any

from qnnrt.errors import FormatError, QnnrtError
from qnnrt.fileio import read_json
from qnnrt.install import extra_hint

__all__ = ["plot_report", "build_figure", "add_parser", "run_plot"]

_MIB = float(1 << 20)
_SERIES_STYLE = {  # (source, key) -> (label, color, linestyle)
    ("host", "heap_in_use"): ("host malloc in use", "tab:blue", "-"),
    ("host", "rss"): ("host RSS", "tab:cyan", ":"),
    ("pd_estimate", "pd_in_use"): ("PD in use (QNN estimate)", "tab:purple", "-"),
    ("dsp", "dsp_heap"): ("DSP heap", "tab:red", "-"),
}
_MARKS = {  # event -> (color, label)
    "create": ("tab:green", "create"),
    "free": ("0.55", "free"),
    "create_failed": ("red", "create failed"),
    "evict": ("tab:orange", "evict"),
    "reload": ("tab:olive", "reload"),
    "prefetch": ("tab:pink", "prefetch"),
}
# the sections qnnrt's commands write into a report: a file with none of them is something else
_REPORT_KEYS = ("residency", "latency_ms", "heap", "profile", "method", "requests", "layout")
_NOTE_WIDTH = 110   # characters per line of a panel's note: wrapped, never cut


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise QnnrtError("`qnnrt plot` needs matplotlib, which is not installed. "
                         f"Install it with: {extra_hint('plot', 'matplotlib')}") from e
    return Figure


REPORT_MAX_BYTES = 1 << 30     # a report of a very long run with its timelines; far past it is not one


def _load(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        raise QnnrtError(f"report {path!r} does not exist; write one with `qnnrt run ... --report {path}`")
    try:
        data = read_json(path, "report", max_bytes=REPORT_MAX_BYTES)
    except FormatError as e:
        raise QnnrtError(f"{e} (pass the file written by --report)") from None
    if not isinstance(data, dict):
        raise QnnrtError(f"report {path!r} is not a qnnrt run report (expected a JSON object)")
    if not any(k in data for k in _REPORT_KEYS):
        raise QnnrtError(f"{path!r} is not a qnnrt run report: {_what_it_is(data)}; plot the file "
                         f"`qnnrt run` / `llm` / `serve` write with --report FILE.json")
    return data


def _what_it_is(data: dict[str, Any]) -> str:
    if "timeline" in data and "sources" in data:
        return "it is a heap profile's timeline (the .json beside --heap-profiling-path's file)"
    if "traceEvents" in data:
        return "it is a trace (--trace: open it in https://ui.perfetto.dev)"
    if "totals" in data and "graphs" in data:
        return "it is an execution profile (--profile-path)"
    keys = ", ".join(sorted(data)[:6]) or "none"
    return f"it has none of a report's sections ({', '.join(_REPORT_KEYS)}; its keys: {keys})"


def _wrap(text: str) -> str:
    return textwrap.fill(text, _NOTE_WIDTH, break_long_words=False, break_on_hyphens=False)


def _note(ax: Any, title: str, text: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=9, color="0.35",
            transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _integer_ticks(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator
    axis.set_major_locator(MaxNLocator(integer=True))


def _outside_legend(ax: Any, handles: list, labels: list) -> None:
    """A legend to the right of the axes: it never covers the data."""
    if handles:
        ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.08, 1.0),
                  borderaxespad=0.0, frameon=False)


def heap_processes(heap: Any) -> list[tuple[str, dict[str, Any]]]:
    """(track name, heap report) of every process that held contexts: this one (PD 0), then each PD
    worker (`processes`: pd1, pd2, ...)."""
    if not isinstance(heap, dict):
        return []
    out = [("PD 0 (this process)", heap)]
    others = heap.get("processes") or {}
    if isinstance(others, dict):
        for label in sorted(others, key=lambda k: (len(k), k)):
            if isinstance(others[label], dict):
                out.append((f"PD {label[2:]} (worker process)" if label.startswith("pd") else label,
                            others[label]))
    return out


def _heap_panels(fig: Any, cell: Any, heap: Any) -> list[Any]:
    title = "Heap across the context lifecycle"
    processes = [(n, h) for n, h in heap_processes(heap) if h.get("timeline")]
    if not processes:
        ax = fig.add_subplot(cell)
        _note(ax, title, "no heap timeline in this report\n(run with --heap-profiling-path FILE)")
        return [ax]
    rows = cell.subgridspec(len(processes), 1, hspace=0.08)
    origins = [int(h["clock_origin_ns"]) for _, h in processes if h.get("clock_origin_ns")]
    origin = min(origins) if origins else None
    axes: list[Any] = []
    for i, (name, h) in enumerate(processes):
        ax = fig.add_subplot(rows[i], sharex=axes[0] if axes else None)
        start = h.get("clock_origin_ns")
        shift = (start - origin) / 1e9 if origin is not None and start else 0.0
        _heap_timeline(ax, h, shift, name)
        head = f"{title}: {name}" if len(processes) > 1 else title
        ax.set_title(f"{head}{_checkpoints(h)}", fontsize=10)
        if i < len(processes) - 1:
            ax.tick_params(labelbottom=False)
        axes.append(ax)
    xlabel = "time since the first profiler started (s)"
    notes = [f"{n}: {s.get('note', '')}" for n, s in (heap.get("sources") or {}).items()
             if isinstance(s, dict) and not s.get("supported")]
    if notes:
        xlabel += "\n" + _wrap("not measured - " + "; ".join(notes))
    axes[-1].set_xlabel(xlabel, fontsize=8)
    return axes


def _heap_timeline(ax: Any, heap: dict[str, Any], shift: float, process: str) -> None:
    timeline = heap["timeline"]
    ts = [float(e.get("time", 0.0)) + shift for e in timeline]
    keys: list[tuple[str, str]] = []
    for e in timeline:
        for src, vals in (e.get("values") or {}).items():
            for k in vals:
                if (src, k) not in keys and k not in ("before_context_created", "after_context_freed"):
                    keys.append((src, k))
    for src, k in keys:
        xs = [t for t, e in zip(ts, timeline) if k in (e.get("values") or {}).get(src, {})]
        ys = [e["values"][src][k] / _MIB for e in timeline if k in (e.get("values") or {}).get(src, {})]
        if not xs:
            continue
        label, color, style = _SERIES_STYLE.get((src, k), (f"{src}.{k}", None, "-"))
        line, = ax.step(xs, ys, where="post", label=label, color=color, linestyle=style, linewidth=1.4)
        line.set_gid(f"{process}: {label}")
    ax.set_ylabel("MiB")
    for event, (color, label) in _MARKS.items():   # event markers as thin vertical lines
        xs = [t for t, e in zip(ts, timeline) if e.get("event") == event]
        if xs:
            ax.vlines(xs, 0, 1, transform=ax.get_xaxis_transform(), colors=color, linewidth=0.7,
                      alpha=0.5, linestyles="--" if event != "create_failed" else "-", label=f"{label} ({len(xs)})")
    for e, t in zip(timeline, ts):
        if e.get("event") in ("before_first_create", "after_last_free"):
            ax.annotate(e["event"], (t, 0.02), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                        va="bottom", ha="right", color="0.25")
    ax.margins(x=0.03)
    live_ax = ax.twinx()
    live, = live_ax.step(ts, [e.get("live", 0) for e in timeline], where="post", color="black", alpha=0.35,
                         linewidth=1.0, label="live contexts")
    live.set_gid(f"{process}: live contexts")
    live_ax.set_ylabel("live contexts", fontsize=8)
    live_ax.set_ylim(bottom=0)
    _integer_ticks(live_ax.yaxis)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = live_ax.get_legend_handles_labels()
    _outside_legend(ax, h1 + h2, l1 + l2)


def _checkpoints(heap: dict[str, Any]) -> str:
    """The two-line file's figures of one process, for its panel's title (never over the data); for
    this process of a multi-PD run, its own figures, then the file's (every PD summed)."""
    prefix, b, a = heap.get("file_prefix"), heap.get("before_context_created"), heap.get("after_context_freed")
    if not prefix or b is None or a is None:
        return ""
    failed = "  CHECK FAILED" if heap.get("ok") is False else ""
    own = heap.get("this_process")
    if isinstance(own, dict) and own.get("before_context_created") is not None:
        ob, oa = own["before_context_created"], own["after_context_freed"]
        return (f"\n{prefix}: before {ob / _MIB:.2f} MiB, after {oa / _MIB:.2f} MiB (delta {_delta(oa - ob)})"
                f"\n{prefix}, every PD summed: before {b / _MIB:.2f} MiB, after {a / _MIB:.2f} MiB"
                f" (delta {_delta(a - b)}){failed}")
    return f"\n{prefix}: before {b / _MIB:.2f} MiB, after {a / _MIB:.2f} MiB (delta {_delta(a - b)}){failed}"


def _latency_panel(ax: Any, latency: Any) -> None:
    title = "Per-iteration latency"
    values = latency.get("all") if isinstance(latency, dict) else None
    if not values:
        _note(ax, title, "no per-iteration latencies in this report\n(`qnnrt run --iteration N` writes them)")
        return
    values = [float(v) for v in values]
    ax.hist(values, bins=min(50, max(5, len(values) // 4)), color="tab:blue", alpha=0.8)
    for key, color in (("median", "black"), ("p90", "tab:red")):
        v = latency.get(key)
        if v is not None:
            ax.axvline(float(v), color=color, linestyle="--", linewidth=1, label=f"{key} {float(v):.3f} ms")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("iterations")
    _integer_ticks(ax.yaxis)
    ax.set_title(f"{title} ({len(values)} iterations)")
    _outside_legend(ax, *ax.get_legend_handles_labels())


def graph_labels(graphs: list[dict[str, Any]]) -> list[str]:
    """Each bar's name: its context file (the graph's name too when the file holds several)."""
    per_context: dict[str, int] = {}
    for g in graphs:
        per_context[str(g.get("context"))] = per_context.get(str(g.get("context")), 0) + 1
    out = []
    for g in graphs:
        ctx = str(g.get("context"))
        name = os.path.basename(ctx) if "/" in ctx else ctx
        out.append(name if per_context[ctx] == 1 else f"{name}: {_short(str(g.get('graph')), 24)}")
    return out


def _graph_panel(ax: Any, profile: Any, top: int = 20) -> None:
    title = "Per-graph QNN execute time"
    graphs = profile.get("graphs") if isinstance(profile, dict) else None
    graphs = [g for g in (graphs or []) if (g.get("qnn_us") or {}).get("total") is not None]
    if not graphs:
        _note(ax, title, "no per-graph profile in this report\n(run with --profile-level basic|detailed)")
        return
    graphs = sorted(graphs, key=lambda g: -g["qnn_us"]["total"])
    shown = graphs[:top]
    labels = graph_labels(shown)[::-1]
    qnn = [g["qnn_us"]["total"] / 1000.0 for g in shown][::-1]
    acc = [((g.get("accel_us") or {}).get("total") or 0) / 1000.0 for g in shown][::-1]
    pos = list(range(len(shown)))
    ax.barh(pos, qnn, color="tab:blue", alpha=0.7, label="QNN execute")
    if any(acc):
        ax.barh(pos, acc, height=0.4, color="tab:red", alpha=0.8, label="accelerator")
    ax.set_yticks(pos)
    ax.set_yticklabels(labels, fontsize=6)
    ax.set_xlabel("total over all executions (ms)")
    more = f", top {top} of {len(graphs)}" if len(graphs) > top else ""
    ax.set_title(f"{title}{more}")
    _outside_legend(ax, *ax.get_legend_handles_labels())


def _delta(nbytes: float) -> str:
    return f"{nbytes / _MIB:+.2f} MiB" if abs(nbytes) >= _MIB else f"{nbytes / 1024:+.1f} KiB"


def _short(s: str, width: int) -> str:
    return s if len(s) <= width else s[: width // 2 - 1] + ".." + s[-(width - width // 2 - 1):]


def _title(report: dict[str, Any]) -> str:
    head = []
    if "method" in report:
        head.append(f"method {report['method']}")
    if "iterations" in report:
        head.append(f"{report['iterations']} iterations")
    if "n_generated" in report:
        head.append(f"{report['n_generated']} generated tokens")
    if isinstance(report.get("requests"), list):
        head.append(f"{len(report['requests'])} requests")
    residency = report.get("residency")
    if isinstance(residency, dict) and residency.get("policy"):
        pds = residency.get("pds")
        head.append(f"residency {residency['policy']}" + (f" over {pds} PDs" if pds else ""))
    where = os.path.basename(str(report.get("path", ""))) or "qnnrt report"
    return f"{where}: " + ", ".join(head) if head else where


def build_figure(report: dict[str, Any], source: str = "the report") -> Any:
    """The report's figure (a matplotlib Figure: heap panels per process, latency, graph times)."""
    Figure = _figure_class()
    heap_rows = max(1, len([1 for _, h in heap_processes(report.get("heap")) if h.get("timeline")]))
    fig = Figure(figsize=(14, 6 + 2.2 * heap_rows), layout="constrained")
    gs = fig.add_gridspec(2, 2, height_ratios=[1.15 * heap_rows, 1])
    try:
        _heap_panels(fig, gs[0, :], report.get("heap"))
        _latency_panel(fig.add_subplot(gs[1, 0]), report.get("latency_ms"))
        _graph_panel(fig.add_subplot(gs[1, 1]), report.get("profile"))
    except (TypeError, AttributeError, KeyError, ValueError, IndexError) as e:
        raise QnnrtError(f"{source}: not a report written by `qnnrt run --report` "
                         f"(a section has an unexpected shape: {type(e).__name__}: {e})") from e
    fig.suptitle(_title(report), fontsize=11)
    return fig


def plot_report(report_json_path: str, out_png: str | None = None) -> str:
    """Draw the report's figure into `out_png` (default: the report path with .png); returns the path."""
    out = out_png or os.path.splitext(report_json_path)[0] + ".png"
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir):
        raise QnnrtError(f"cannot write the plot to {out!r}: directory {out_dir!r} does not exist. "
                         f"Create it first or pass -o with another path.")
    _figure_class()
    fig = build_figure(_load(report_json_path), report_json_path)
    import io

    from qnnrt.fileio import write_atomic
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    write_atomic(out, buf.getbuffer(), "plot")  # never through a link, never half a file
    return out


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `plot REPORT.json [-o out.png]` on the CLI's subparsers; sets `func=run_plot`."""
    p = subparsers.add_parser("plot", help="draw heap timeline, latency histogram and graph times of a run report",
                              description="Draw a run report (from `qnnrt run --report r.json`) as a PNG: "
                                          "heap across the context lifecycle of every PD, latency histogram, "
                                          "per-graph QNN time. Needs matplotlib "
                                          f"({extra_hint('plot', 'matplotlib')}).")
    p.add_argument("report", help="run report JSON written by `qnnrt run --report`")
    p.add_argument("-o", "--output", default=None, help="PNG to write (default: REPORT with .png)")
    p.set_defaults(func=run_plot)
    return p


def run_plot(args: argparse.Namespace) -> int:
    """CLI entry: draw and print the path. QnnrtError propagates to the CLI's error handler."""
    out = plot_report(args.report, args.output)
    print(f"wrote {out}")
    return 0
