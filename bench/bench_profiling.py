"""Profiling overhead at each level vs off, on a built program.

    python bench/bench_profiling.py PROGRAM_DIR [--iterations 10] [--rounds 2]

Levels are interleaved per round; the heap profiler (--heap-profiling-path) is measured as its own
row. Prints median per-iteration latency and the ratio to `off`.
"""
from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("program")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
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
