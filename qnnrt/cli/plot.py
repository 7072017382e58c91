"""`qnnrt plot REPORT.json`: one figure of a run report.

Panels: the heap timeline across the context lifecycle (per source, creates / frees / evictions marked,
live-context count), the per-iteration latency histogram, and per-graph QNN time bars. A report from a
run without some profiling has sections missing; their panel then says what flag would fill it instead
of failing. matplotlib is an optional extra, imported only here, through the object API (no pyplot
global state, no GUI backend).
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

from qnnrt.errors import QnnrtError
from qnnrt.install import extra_hint

__all__ = ["plot_report", "add_parser", "run_plot"]

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


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise QnnrtError("`qnnrt plot` needs matplotlib, which is not installed. "
                         f"Install it with: {extra_hint('plot', 'matplotlib')}") from e
    return Figure


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError as e:
        raise QnnrtError(f"report {path!r} does not exist; write one with `qnnrt run ... --report {path}`") from e
    except (OSError, UnicodeDecodeError) as e:
        raise QnnrtError(f"cannot read report {path!r}: {e}") from e
    except json.JSONDecodeError as e:
        raise QnnrtError(f"report {path!r} is not valid JSON ({e}); pass the file written by --report") from e
    if not isinstance(data, dict):
        raise QnnrtError(f"report {path!r} is not a qnnrt run report (expected a JSON object)")
    return data


def _note(ax: Any, title: str, text: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=9, color="0.35",
            transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _heap_panel(ax: Any, heap: Any) -> None:
    title = "Heap across the context lifecycle"
    timeline = heap.get("timeline") if isinstance(heap, dict) else None
    if not timeline:
        _note(ax, title, "no heap timeline in this report\n(run with --heap-profiling-path FILE)")
        return
    ts = [float(e.get("time", 0.0)) for e in timeline]
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
        ax.step(xs, ys, where="post", label=label, color=color, linestyle=style, linewidth=1.4)
    unsupported = [f"{n}: {s.get('note', '')}" for n, s in (heap.get("sources") or {}).items()
                   if isinstance(s, dict) and not s.get("supported")]
    xlabel = "time since profiler start (s)"
    if unsupported:
        xlabel += "\nnot measured - " + _short("; ".join(unsupported), 160)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("MiB")
    ax.set_title(title)
    # event markers as thin vertical lines, one collection per kind
    for event, (color, label) in _MARKS.items():
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
    live_ax.step(ts, [e.get("live", 0) for e in timeline], where="post", color="black", alpha=0.35,
                 linewidth=1.0, label="live contexts")
    live_ax.set_ylabel("live contexts")
    live_ax.set_ylim(bottom=0)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = live_ax.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left", ncol=2)
    prefix, b, a = heap.get("file_prefix"), heap.get("before_context_created"), heap.get("after_context_freed")
    if prefix and b is not None and a is not None:
        ok = heap.get("ok")
        ax.text(0.99, 0.02, f"{prefix}: before {b / _MIB:.2f} MiB, after {a / _MIB:.2f} MiB "
                f"(delta {_delta(a - b)}){'' if ok is not False else '  CHECK FAILED'}",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=8,
                bbox={"boxstyle": "round", "fc": "white", "alpha": 0.8})


def _latency_panel(ax: Any, latency: Any) -> None:
    title = "Per-iteration latency"
    values = latency.get("all") if isinstance(latency, dict) else None
    if not values:
        _note(ax, title, "no per-iteration latencies in this report")
        return
    values = [float(v) for v in values]
    ax.hist(values, bins=min(50, max(5, len(values) // 4)), color="tab:blue", alpha=0.8)
    for key, color in (("median", "black"), ("p90", "tab:red")):
        v = latency.get(key)
        if v is not None:
            ax.axvline(float(v), color=color, linestyle="--", linewidth=1, label=f"{key} {float(v):.3f} ms")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("iterations")
    ax.set_title(f"{title} ({len(values)} iterations)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _graph_panel(ax: Any, profile: Any, top: int = 20) -> None:
    title = "Per-graph QNN execute time"
    graphs = profile.get("graphs") if isinstance(profile, dict) else None
    graphs = [g for g in (graphs or []) if (g.get("qnn_us") or {}).get("total") is not None]
    if not graphs:
        _note(ax, title, "no per-graph profile in this report\n(run with --profile-level basic|detailed)")
        return
    graphs = sorted(graphs, key=lambda g: -g["qnn_us"]["total"])
    shown = graphs[:top]
    names = [str(g.get("graph")) for g in shown]
    labels = [_short(n if names.count(n) == 1 else f"{g.get('context')}/{n}", 32)
              for n, g in zip(names, shown)][::-1]
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
    ax.legend(fontsize=7, loc="lower right")


def _delta(nbytes: float) -> str:
    return f"{nbytes / _MIB:+.2f} MiB" if abs(nbytes) >= _MIB else f"{nbytes / 1024:+.1f} KiB"


def _short(s: str, width: int) -> str:
    return s if len(s) <= width else s[: width // 2 - 1] + ".." + s[-(width - width // 2 - 1):]


def plot_report(report_json_path: str, out_png: str | None = None) -> str:
    """Draw the report's figure into `out_png` (default: the report path with .png); returns the path."""
    Figure = _figure_class()
    report = _load(report_json_path)
    out = out_png or os.path.splitext(report_json_path)[0] + ".png"
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir):
        raise QnnrtError(f"cannot write the plot to {out!r}: directory {out_dir!r} does not exist. "
                         f"Create it first or pass -o with another path.")
    fig = Figure(figsize=(13, 9), layout="constrained")
    gs = fig.add_gridspec(2, 2, height_ratios=[1.15, 1])
    try:
        _heap_panel(fig.add_subplot(gs[0, :]), report.get("heap"))
        _latency_panel(fig.add_subplot(gs[1, 0]), report.get("latency_ms"))
        _graph_panel(fig.add_subplot(gs[1, 1]), report.get("profile"))
    except (TypeError, AttributeError, KeyError, ValueError, IndexError) as e:
        raise QnnrtError(f"{report_json_path}: not a report written by `qnnrt run --report` "
                         f"(a section has an unexpected shape: {type(e).__name__}: {e})") from e
    residency = report.get("residency")
    policy = residency.get("policy") if isinstance(residency, dict) else None
    head = [f"method {report.get('method', '?')}", f"{report.get('iterations', '?')} iterations"]
    if policy:
        head.append(f"residency {policy}")
    fig.suptitle("qnnrt run: " + ", ".join(head), fontsize=11)
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
                                          "heap across the context lifecycle, latency histogram, per-graph "
                                          f"QNN time. Needs matplotlib ({extra_hint('plot', 'matplotlib')}).")
    p.add_argument("report", help="run report JSON written by `qnnrt run --report`")
    p.add_argument("-o", "--output", default=None, help="PNG to write (default: REPORT with .png)")
    p.set_defaults(func=run_plot)
    return p


def run_plot(args: argparse.Namespace) -> int:
    """CLI entry: draw and print the path. QnnrtError propagates to the CLI's error handler."""
    out = plot_report(args.report, args.output)
    print(f"wrote {out}")
    return 0
