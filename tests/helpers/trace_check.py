"""Structural checks of a Chrome trace-event file qnnrt wrote: the format Perfetto UI and
chrome://tracing read (the JSON object form), proper nesting of the slices on each thread, and the
figures a test compares with a run's report."""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PHASES = {"X", "C", "i", "M"}
EPS_US = 0.002   # ts / dur are rounded to the nanosecond (3 decimals of a microsecond)


@dataclass
class Trace:
    data: dict[str, Any]
    processes: dict[int, str] = field(default_factory=dict)     # pid -> track name
    slices: list[dict[str, Any]] = field(default_factory=list)
    counters: list[dict[str, Any]] = field(default_factory=list)
    instants: list[dict[str, Any]] = field(default_factory=list)

    def pid_of(self, name_part: str) -> int:
        pids = [p for p, n in self.processes.items() if name_part in n]
        assert len(pids) == 1, (name_part, self.processes)
        return pids[0]

    def of(self, cat: str, pid: int | None = None) -> list[dict[str, Any]]:
        return [s for s in self.slices if s.get("cat") == cat and (pid is None or s["pid"] == pid)]

    def counter(self, name: str, key: str, pid: int) -> list[float]:
        """The values of counter `name`.`key` on `pid`'s track, in time order."""
        evs = sorted((c for c in self.counters if c["name"] == name and c["pid"] == pid),
                     key=lambda c: c["ts"])
        return [c["args"][key] for c in evs]


def check_trace(path: str | Path) -> Trace:
    """Load and check a trace file; returns its parts. Fails on anything a trace viewer would
    reject or draw wrongly (unknown phases, negative durations, slices that overlap without
    nesting on one thread, events on a process without a name)."""
    data = json.loads(Path(path).read_text())
    assert isinstance(data, dict) and isinstance(data.get("traceEvents"), list), "not a trace-event object"
    t = Trace(data)
    for e in data["traceEvents"]:
        assert isinstance(e, dict) and e.get("ph") in PHASES, e
        assert isinstance(e.get("pid"), int) and isinstance(e.get("name"), str), e
        ph = e["ph"]
        if ph == "M":
            if e["name"] == "process_name":
                t.processes[e["pid"]] = e["args"]["name"]
            continue
        assert isinstance(e.get("ts"), (int, float)), e
        if ph == "X":
            assert isinstance(e.get("tid"), int) and isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, e
            t.slices.append(e)
        elif ph == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()), e
            t.counters.append(e)
        else:
            assert isinstance(e.get("tid"), int) and e.get("s") in ("t", "p", "g"), e
            t.instants.append(e)
        if "args" in e:
            json.dumps(e["args"])
    named = set(t.processes)
    assert {e["pid"] for e in t.slices + t.counters + t.instants} <= named, "a process track without a name"
    _check_nesting(t.slices)
    return t


def _check_nesting(slices: list[dict[str, Any]]) -> None:
    by_thread: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for s in slices:
        by_thread[(s["pid"], s["tid"])].append(s)
    for thread, evs in by_thread.items():
        evs.sort(key=lambda s: (s["ts"], -s["dur"]))
        stack: list[dict[str, Any]] = []
        for s in evs:
            while stack and s["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - EPS_US:
                stack.pop()
            if stack:
                parent = stack[-1]
                assert s["ts"] + s["dur"] <= parent["ts"] + parent["dur"] + EPS_US, (
                    f"on {thread}: {s['name']!r} [{s['ts']}, +{s['dur']}] overlaps "
                    f"{parent['name']!r} [{parent['ts']}, +{parent['dur']}] without nesting in it")
            stack.append(s)


def parent_of(t: Trace, s: dict[str, Any]) -> dict[str, Any] | None:
    """The innermost slice on `s`'s thread that contains it."""
    best = None
    for p in t.slices:
        if p is s or (p["pid"], p["tid"]) != (s["pid"], s["tid"]):
            continue
        end = p["ts"] + p["dur"]
        if p["ts"] - EPS_US <= s["ts"] < end - EPS_US and s["ts"] + s["dur"] <= end + EPS_US \
                and (p["dur"], p["ts"]) != (s["dur"], s["ts"]):
            if best is None or p["dur"] < best["dur"]:
                best = p
    return best
