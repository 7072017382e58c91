"""Aggregate QNN profile events per graph, per op and per context, across iterations.

The core's Profile reader hands over event trees (`{"name", "type", "unit", "value", "sub"}`) for each
context creation and graph execution. Names carry the meaning ("QNN (execute) time", "Accelerator
(execute) time", "Accelerator (execute) time (cycles)" with per-op sub-events "Add0:OpId_17 (cycles)");
type codes differ between backends and SDK versions, so classification goes by name and unit. Events
we do not know are kept too, aggregated by name, so nothing QNN reports is lost.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import threading
from typing import Any, Iterable

from qnnrt.core.profile import PROFILE_LEVELS
from qnnrt.errors import QnnrtError
from qnnrt.fileio import check_output_path, write_atomic

__all__ = ["ExecutionProfiler", "PROFILE_LEVELS", "PHASES", "clean_op_name", "classify_event"]

PHASES = ("context_create", "execute", "context_free")

_TIMED = re.compile(r"^\s*(?P<who>qnn|accelerator)\s*\((?P<action>[^)]*)\)\s*time\s*(?:\((?P<suffix>[^)]*)\))?\s*$",
                    re.I)
_OP = re.compile(r"^(?P<name>.*?)[\s:]*\bOpId_(?P<id>\d+)\b\s*(?:\([^)]*\))?\s*$")
_UNIT_SUFFIX = re.compile(r"\s*\((?:cycles|us|ms|ns|bytes|count)\)\s*$", re.I)
_TO_US = {"us": 1.0, "ms": 1000.0, "ns": 0.001, "s": 1e6, "sec": 1e6}


def clean_op_name(name: str) -> tuple[str, int | None]:
    """("Add0", 17) from "Add0:OpId_17 (cycles)"; ("Input", 2) from "Input OpId_2 (cycles)"."""
    m = _OP.match(name)
    if m:
        return (m.group("name").strip() or name.strip(), int(m.group("id")))
    return (_UNIT_SUFFIX.sub("", name).strip(), None)


_ACTIONS = {"execute": ("execute",), "context_create": ("load binary", "init", "create"),
            "context_free": ("deinit", "free")}


def classify_event(name: str, unit: str, phase: str = "execute") -> str | None:
    """'qnn_us', 'accel_us' or 'cycles' for the headline time events of `phase`, else None.

    Only the exact action counts ("Accelerator (execute) time", not "Accelerator (execute excluding
    wait) time", which devices report as well and would count twice).
    """
    m = _TIMED.match(name or "")
    if not m or " ".join(m.group("action").lower().split()) not in _ACTIONS.get(phase, ()):
        return None
    unit = (unit or "").lower()
    suffix = (m.group("suffix") or "").lower()
    if suffix == "cycles" or unit == "cycles":
        return "cycles" if m.group("who").lower() == "accelerator" else None
    if unit in _TO_US:
        return "qnn_us" if m.group("who").lower() == "qnn" else "accel_us"
    return None


class _Stats:
    """Count, total, min, max and the values (for median / p90)."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: list[float] = []

    def add(self, v: float) -> None:
        self.values.append(v)

    def to_json(self) -> dict[str, Any] | None:
        if not self.values:
            return None
        vs = sorted(self.values)
        n = len(vs)
        total = sum(vs)
        num = lambda x: int(x) if float(x).is_integer() else round(x, 3)
        return {"count": n, "total": num(total), "mean": round(total / n, 3), "min": num(vs[0]),
                "max": num(vs[-1]), "median": num(_percentile(vs, 50)), "p90": num(_percentile(vs, 90))}


def _percentile(sorted_values: list[float], q: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    k = (len(sorted_values) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


class _GraphStats:
    def __init__(self, context: str, graph: str) -> None:
        self.context, self.graph = context, graph
        self.executions = 0
        self.without_times = 0
        self.iterations: set[int] = set()
        self.m = {"qnn_us": _Stats(), "accel_us": _Stats(), "cycles": _Stats()}


class _ContextStats:
    def __init__(self, context: str) -> None:
        self.context = context
        self.count = {"context_create": 0, "context_free": 0}
        self.m = {(p, k): _Stats() for p in ("context_create", "context_free") for k in ("qnn_us", "accel_us")}


class ExecutionProfiler:
    """Collects profile event trees per (phase, graph, context); thread-safe; no-op at level "off"."""

    def __init__(self, level: str = "basic") -> None:
        if level not in PROFILE_LEVELS:
            raise QnnrtError(f"profile level must be one of {PROFILE_LEVELS}, not {level!r}")
        self.level = level
        self._lock = threading.Lock()
        self._graphs: dict[tuple[str, str], _GraphStats] = {}
        self._ops: dict[tuple[str, str, str, int | None, str], _Stats] = {}
        self._contexts: dict[str, _ContextStats] = {}
        self._other: dict[tuple[str, str, str], _Stats] = {}
        self._records = 0

    @property
    def enabled(self) -> bool:
        return self.level != "off"

    # -- input --------------------------------------------------------------------------------------
    def record(self, phase: str, graph: str | None, context: str, events: list[dict[str, Any]],
               iteration: int | None = None) -> None:
        """Add the events of one context create/free (graph may be None) or one graph execution."""
        if not self.enabled:
            return
        with self._lock:
            self._records += 1
            if phase == "execute":
                self._record_execute(str(graph), str(context), events or [], iteration)
            elif phase in ("context_create", "context_free"):
                self._record_context(phase, str(context), events or [])
            else:
                self._record_other(phase, events or [])

    def _record_execute(self, graph: str, context: str, events: list[dict[str, Any]],
                        iteration: int | None) -> None:
        g = self._graphs.get((context, graph))
        if g is None:
            g = self._graphs[(context, graph)] = _GraphStats(context, graph)
        g.executions += 1
        if iteration is not None:
            g.iterations.add(int(iteration))
        seen = False
        for ev in events:
            name, unit, value = str(ev.get("name", "")), str(ev.get("unit", "")), ev.get("value", 0)
            kind = classify_event(name, unit, "execute")
            if kind is not None:
                g.m[kind].add(self._as_us(value, unit) if kind != "cycles" else float(value))
                seen = seen or kind == "qnn_us"
                for sub in ev.get("sub") or []:
                    self._record_op(context, graph, sub)
            else:
                self._add_other("execute", ev)
        if not seen:
            g.without_times += 1

    def _record_op(self, context: str, graph: str, ev: dict[str, Any]) -> None:
        unit = str(ev.get("unit", "")).lower()
        if unit not in ("cycles",) and unit not in _TO_US:
            return
        op, op_id = clean_op_name(str(ev.get("name", "")))
        unit_key = "cycles" if unit == "cycles" else "us"
        key = (context, graph, op, op_id, unit_key)
        st = self._ops.get(key)
        if st is None:
            st = self._ops[key] = _Stats()
        st.add(float(ev.get("value", 0)) if unit_key == "cycles" else self._as_us(ev.get("value", 0), unit))

    def _record_context(self, phase: str, context: str, events: list[dict[str, Any]]) -> None:
        c = self._contexts.get(context)
        if c is None:
            c = self._contexts[context] = _ContextStats(context)
        c.count[phase] += 1
        for ev in events:
            name, unit, value = str(ev.get("name", "")), str(ev.get("unit", "")), ev.get("value", 0)
            kind = classify_event(name, unit, phase)
            if kind in ("qnn_us", "accel_us"):
                c.m[(phase, kind)].add(self._as_us(value, unit))
            else:
                self._add_other(phase, ev)

    def _record_other(self, phase: str, events: list[dict[str, Any]]) -> None:
        for ev in events:
            self._add_other(phase, ev)

    def _add_other(self, phase: str, ev: dict[str, Any]) -> None:
        key = (phase, str(ev.get("name", "")), str(ev.get("unit", "")))
        st = self._other.get(key)
        if st is None:
            st = self._other[key] = _Stats()
        try:
            st.add(float(ev.get("value", 0)))
        except (TypeError, ValueError):
            pass

    @staticmethod
    def _as_us(value: Any, unit: str) -> float:
        return float(value) * _TO_US.get((unit or "us").lower(), 1.0)

    # -- output -------------------------------------------------------------------------------------
    def accel_cycles(self) -> float:
        """Accelerator cycles of every graph execution recorded so far (QNN reports them at the
        detailed level; on the simulator they are simulated HTP cycles)."""
        with self._lock:
            return float(sum(sum(g.m["cycles"].values) for g in self._graphs.values()))

    def executions(self) -> dict[str, int]:
        """Executions recorded so far per graph ("context/graph")."""
        with self._lock:
            return {f"{c}/{g}": st.executions for (c, g), st in self._graphs.items()}

    def floor_cycles(self) -> dict[str, float]:
        """Per graph ("context/graph"), the sum over its ops of each op's fewest cycles in any
        execution so far: one call's simulated cost without the stalls a loaded host adds to the
        simulator's counts (the same op on the same shapes costs the same; its profiled cycles do
        not: bench/RESULTS.md, speculative decoding)."""
        floors: dict[str, float] = {}
        with self._lock:
            for (ctx, graph, _op, _id, unit), st in self._ops.items():
                if unit == "cycles" and st.values:
                    key = f"{ctx}/{graph}"
                    floors[key] = floors.get(key, 0.0) + min(st.values)
        return floors

    def to_json(self) -> dict[str, Any]:
        """Per-graph, per-op, per-context aggregates; graphs and ops sorted by time, largest first."""
        with self._lock:
            graphs: list[dict[str, Any]] = []
            for g in self._graphs.values():
                graph_cycles = sum(g.m["cycles"].values)
                graphs.append({"context": g.context, "graph": g.graph, "executions": g.executions,
                               "iterations": len(g.iterations), "records_without_qnn_time": g.without_times,
                               **{k: s.to_json() for k, s in g.m.items()},
                               "_cycles_total": graph_cycles})
            graphs.sort(key=lambda d: (-(d["qnn_us"] or {}).get("total", 0), d["context"], d["graph"]))
            cycles_by_graph = {(d["context"], d["graph"]): d.pop("_cycles_total") for d in graphs}
            op_sums: dict[tuple[str, str, str], float] = {}
            for (ctx, graph, _op, _id, unit), st in self._ops.items():
                op_sums[(ctx, graph, unit)] = op_sums.get((ctx, graph, unit), 0.0) + sum(st.values)
            ops: list[dict[str, Any]] = []
            for (ctx, graph, op, op_id, unit), st in self._ops.items():
                j = st.to_json() or {}
                denom = cycles_by_graph.get((ctx, graph)) if unit == "cycles" else None
                denom = denom or op_sums.get((ctx, graph, unit)) or 0
                ops.append({"context": ctx, "graph": graph, "op": op, "op_id": op_id, "unit": unit,
                            "executions": j.get("count", 0), "total": j.get("total"), "mean": j.get("mean"),
                            "min": j.get("min"), "max": j.get("max"),
                            "share_pct": round(100.0 * sum(st.values) / denom, 2) if denom else None})
            ops.sort(key=lambda d: (d["unit"] != "cycles", -(d["total"] or 0), d["graph"], d["op"]))
            contexts: list[dict[str, Any]] = []
            for c in self._contexts.values():
                contexts.append({"context": c.context, "creates": c.count["context_create"],
                                 "frees": c.count["context_free"],
                                 "load_qnn_us": c.m[("context_create", "qnn_us")].to_json(),
                                 "load_accel_us": c.m[("context_create", "accel_us")].to_json(),
                                 "deinit_qnn_us": c.m[("context_free", "qnn_us")].to_json(),
                                 "deinit_accel_us": c.m[("context_free", "accel_us")].to_json()})
            contexts.sort(key=lambda d: d["context"])
            other = [{"phase": p, "name": n, "unit": u, **(s.to_json() or {"count": 0})}
                     for (p, n, u), s in sorted(self._other.items())]
            totals = {
                "records": self._records,
                "graphs": len(graphs),
                "executions": sum(g.executions for g in self._graphs.values()),
                "qnn_execute_us": _sum(g.m["qnn_us"].values for g in self._graphs.values()),
                "accel_execute_us": _sum(g.m["accel_us"].values for g in self._graphs.values()),
                "accel_cycles": _sum(g.m["cycles"].values for g in self._graphs.values()),
                "context_creates": sum(c.count["context_create"] for c in self._contexts.values()),
                "qnn_load_us": _sum(c.m[("context_create", "qnn_us")].values for c in self._contexts.values()),
            }
            return {"level": self.level, "totals": totals, "graphs": graphs, "ops": ops,
                    "contexts": contexts, "other_events": other}

    def csv_text(self, data: dict[str, Any] | None = None) -> str:
        """One CSV, a `kind` column telling graph / op / context rows apart (us, cycles as named)."""
        data = data or self.to_json()
        cols = ["kind", "context", "graph", "op", "op_id", "count", "qnn_us_total", "qnn_us_mean",
                "qnn_us_min", "qnn_us_max", "accel_us_total", "accel_us_mean", "cycles_total", "cycles_mean",
                "share_pct"]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        for g in data["graphs"]:
            q, a, c = g["qnn_us"] or {}, g["accel_us"] or {}, g["cycles"] or {}
            w.writerow({"kind": "graph", "context": g["context"], "graph": g["graph"], "count": g["executions"],
                        "qnn_us_total": q.get("total"), "qnn_us_mean": q.get("mean"), "qnn_us_min": q.get("min"),
                        "qnn_us_max": q.get("max"), "accel_us_total": a.get("total"),
                        "accel_us_mean": a.get("mean"), "cycles_total": c.get("total"),
                        "cycles_mean": c.get("mean")})
        for o in data["ops"]:
            row = {"kind": "op", "context": o["context"], "graph": o["graph"], "op": o["op"],
                   "op_id": o["op_id"], "count": o["executions"], "share_pct": o["share_pct"]}
            if o["unit"] == "cycles":
                row.update(cycles_total=o["total"], cycles_mean=o["mean"])
            else:
                row.update(accel_us_total=o["total"], accel_us_mean=o["mean"])
            w.writerow(row)
        for c in data["contexts"]:
            q, a = c["load_qnn_us"] or {}, c["load_accel_us"] or {}
            w.writerow({"kind": "context_create", "context": c["context"], "count": c["creates"],
                        "qnn_us_total": q.get("total"), "qnn_us_mean": q.get("mean"), "qnn_us_min": q.get("min"),
                        "qnn_us_max": q.get("max"), "accel_us_total": a.get("total"),
                        "accel_us_mean": a.get("mean")})
        return buf.getvalue()

    def write(self, path: str) -> tuple[str, str]:
        """Write JSON to `path` and CSV next to it (suffix .csv); both atomic. Returns both paths."""
        root, ext = os.path.splitext(path)
        json_path = root + ".json" if ext.lower() == ".csv" else path
        csv_path = root + ".csv"
        check_output_path(json_path, "execution profile")
        data = self.to_json()
        j = write_atomic(json_path, json.dumps(data, indent=1) + "\n", "execution profile")
        c = write_atomic(csv_path, self.csv_text(data), "execution profile CSV")
        return j, c

    def summary_table(self, top: int = 10) -> str:
        """Top graphs by QNN execute time and top ops by accelerator cycles, for the runner to print."""
        if not self.enabled:
            return "Execution profile: off"
        data = self.to_json()
        t = data["totals"]
        lines = [f"Execution profile (level {self.level}): {t['graphs']} graph(s), {t['executions']} "
                 f"execution(s), QNN execute {_ms(t['qnn_execute_us'])} total"]
        if not data["graphs"] and not data["contexts"]:
            return lines[0] + "\n  no profile events were recorded"
        if data["graphs"]:
            lines.append(f"Top {min(top, len(data['graphs']))} graphs by QNN execute time:")
            lines.append(f"  {'graph':<44} {'context':<20} {'runs':>5} {'total ms':>9} {'mean us':>9} "
                         f"{'accel us':>9} {'cycles':>10}")
            for g in data["graphs"][:top]:
                q, a, c = g["qnn_us"] or {}, g["accel_us"] or {}, g["cycles"] or {}
                lines.append(f"  {_short(g['graph'], 44):<44} {_short(g['context'], 20):<20} {g['executions']:>5} "
                             f"{_f(q.get('total'), 1e-3, 2):>9} {_f(q.get('mean'), 1, 1):>9} "
                             f"{_f(a.get('mean'), 1, 1):>9} {_f(c.get('mean'), 1, 0):>10}")
        cyc_ops = [o for o in data["ops"] if o["unit"] == "cycles"]
        us_ops = [o for o in data["ops"] if o["unit"] == "us"]
        for ops, label in ((cyc_ops, "cycles"), (us_ops, "us")):
            if not ops:
                continue
            lines.append(f"Top {min(top, len(ops))} ops by accelerator {label} (summed over runs):")
            lines.append(f"  {'op':<28} {'graph':<40} {'runs':>5} {'total':>12} {'mean':>10} {'share':>6}")
            for o in ops[:top]:
                share = "" if o["share_pct"] is None else f"{o['share_pct']:.1f}%"
                lines.append(f"  {_short(o['op'], 28):<28} {_short(o['graph'], 40):<40} {o['executions']:>5} "
                             f"{_f(o['total'], 1, 0):>12} {_f(o['mean'], 1, 1):>10} {share:>6}")
        if data["contexts"]:
            lines.append(f"Context creation in this process: {t['context_creates']} create(s), QNN load binary "
                         f"{_ms(t['qnn_load_us'])} total")
        return "\n".join(lines)


def _sum(lists: Iterable[list[float]]) -> float:
    total = sum(sum(v) for v in lists)
    return int(total) if float(total).is_integer() else round(total, 3)


def _ms(us: float) -> str:
    return f"{us / 1000.0:.2f} ms"


def _f(v: Any, scale: float, digits: int) -> str:
    return "-" if v is None else f"{v * scale:.{digits}f}"


def _short(s: str, width: int) -> str:
    s = str(s)
    if len(s) <= width:
        return s
    keep = width - 3
    return s[: keep // 2] + "..." + s[len(s) - (keep - keep // 2):]
