"""Profiling overhead at each level vs off, on a built program; or, with --cycles-vs-time, what the
simulator's profiled cycles follow.

    python bench/bench_profiling.py PROGRAM_DIR [--iterations 10] [--rounds 2]
    python bench/bench_profiling.py MODEL.pte --cycles-vs-time kv_forward [--calls 8] [--inputs in.npz]

Levels are interleaved per round; the heap profiler (--heap-profiling-path) is measured as its own
row. Prints median per-iteration latency and the ratio to `off`.

--cycles-vs-time METHOD: the same call of METHOD (the same inputs: the file's I/O specs filled by
qnnrt's random_inputs, seed 0, or --inputs, an .npz by input name) --calls times in a row after one
warm-up, at the detailed level; per call the accelerator cycles QNN's profile reports and QNN's own
execute time, then their range, Pearson correlation and cycles per microsecond of QNN time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(program: Path, level: str, heap: bool, iterations: int) -> list[float]:
    import qnnrt
    from qnnrt.cli.io_files import random_inputs
    from qnnrt.profiling.exec_profile import ExecutionProfiler
    prof = ExecutionProfiler(level) if level != "off" else None
    with tempfile.TemporaryDirectory() as d:
        opts = qnnrt.LoadOptions(profile_level=level, exec_profiler=prof,
                                 heap_profiling_path=str(Path(d) / "heap.txt") if heap else None)
        with qnnrt.load(program, options=opts) as prog:
            m = prog.method()
            feed = random_inputs(m.inputs, 0)
            prog.run(m.name, feed)
            times = []
            for _ in range(iterations):
                t = time.perf_counter()
                prog.run(m.name, feed)
                times.append(time.perf_counter() - t)
    return times


def cycles_vs_time(program: Path, method: str, calls: int, inputs: str | None) -> None:
    """One call repeated: QNN's profiled accelerator cycles against its QNN execute time, per call."""
    import numpy as np

    import qnnrt
    from qnnrt.cli.io_files import random_inputs
    from qnnrt.profiling.exec_profile import ExecutionProfiler, classify_event

    per_call: list[dict[str, float]] = []

    class PerCall(ExecutionProfiler):
        def record(self, phase, graph, context, events, iteration=None):  # type: ignore[no-untyped-def]
            super().record(phase, graph, context, events, iteration)
            if phase == "execute":
                got: dict[str, float] = {}
                for ev in events or []:
                    kind = classify_event(str(ev.get("name", "")), str(ev.get("unit", "")), "execute")
                    if kind is not None:
                        value = float(ev.get("value", 0))
                        if kind != "cycles":
                            value = self._as_us(value, str(ev.get("unit", "")))
                        got[kind] = got.get(kind, 0.0) + value
                per_call.append(got)

    prof = PerCall("detailed")
    with qnnrt.load(program, options=qnnrt.LoadOptions(profile_level="detailed", exec_profiler=prof)) as prog:
        m = prog.method(method)
        if inputs:
            with np.load(inputs) as z:
                feed = {s.name: z[s.name] for s in m.inputs}
        else:
            feed = random_inputs(m.inputs, 0)
        prog.run(m.name, feed)                  # warm-up: contexts created, first-call costs
        per_call.clear()
        wall = []
        for _ in range(calls):
            t = time.perf_counter()
            prog.run(m.name, feed)
            wall.append(time.perf_counter() - t)
    cyc = np.array([c.get("cycles", np.nan) for c in per_call])
    qus = np.array([c.get("qnn_us", np.nan) for c in per_call])
    print(f"{program}: {method}, the same call {calls} times (detailed profile); load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| call | accelerator cycles | QNN execute time | cycles per us | wall |")
    print("| --- | --- | --- | --- | --- |")
    for i, (c, q, w) in enumerate(zip(cyc, qus, wall)):
        print(f"| {i} | {c / 1e6:.1f} M | {q / 1e3:.1f} ms | {c / q:.1f} | {w * 1e3:.1f} ms |")
    r = float(np.corrcoef(cyc, qus)[0, 1]) if calls > 2 else float("nan")
    rate = cyc / qus
    print(f"cycles {cyc.min() / 1e6:.0f}-{cyc.max() / 1e6:.0f} M (median {np.median(cyc) / 1e6:.0f} M), QNN time "
          f"{qus.min() / 1e3:.0f}-{qus.max() / 1e3:.0f} ms; correlation {r:.3f}; cycles per us "
          f"{rate.min():.1f}-{rate.max():.1f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("program")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cycles-vs-time", metavar="METHOD",
                    help="instead: METHOD's same call --calls times, profiled cycles vs QNN time per call")
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--inputs", help="with --cycles-vs-time: the call's inputs, an .npz keyed by input name")
    a = ap.parse_args()
    if a.cycles_vs_time:
        cycles_vs_time(Path(a.program), a.cycles_vs_time, a.calls, a.inputs)
        return
    rows = [("off", "off", False), ("basic", "basic", False), ("detailed", "detailed", False),
            ("heap profiling only", "off", True)]
    times: dict[str, list[float]] = {r[0]: [] for r in rows}
    for _ in range(a.rounds):
        for label, level, heap in rows:
            times[label] += run(Path(a.program), level, heap, a.iterations)
    base = statistics.median(times["off"])
    print(f"{a.program}: {a.iterations} iterations x {a.rounds} rounds per level")
    print("| profiling | median ms / iteration | vs off |")
    print("| --- | --- | --- |")
    for label, _, _ in rows:
        med = statistics.median(times[label])
        print(f"| {label} | {med * 1e3:.1f} | {med / base:.3f} |")


if __name__ == "__main__":
    main()
