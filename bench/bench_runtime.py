"""Runtime benchmarks on a built program: qnnrt vs ONNX Runtime, qnnrt's overhead over
QNN's own execute time, bounded:K vs lazy (latency and peak RSS), and time to first output.

    python bench/bench_runtime.py PROGRAM_DIR [--iterations 20] [--rounds 3] [--skip-ort]

Every number comes from this one run. Peak RSS is measured in a fresh child process per policy.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def feed_for(method, seed=0):
    from qnnrt.cli.io_files import random_inputs
    return random_inputs(method.inputs, seed)


def time_qnnrt(program, residency, iterations, rounds):
    import qnnrt
    t0 = time.perf_counter()
    with qnnrt.load(program, residency=residency) as prog:
        m = prog.method()
        feed = feed_for(m)
        first = prog.run(m.name, feed)
        first_s = time.perf_counter() - t0
        times = []
        for _ in range(rounds):
            for _ in range(iterations):
                t = time.perf_counter()
                prog.run(m.name, feed)
                times.append(time.perf_counter() - t)
        return {"first_output_s": first_s, "median_ms": statistics.median(times) * 1e3,
                "summary": prog.pool.summary(), "outputs": first, "feed": feed, "method": m.name}


def overhead(program, iterations):
    """Iteration wall time vs the limit: QNN's own 'QNN (execute) time' events + CPU segment time."""
    import qnnrt
    from qnnrt.runtime import cpu_segment
    from qnnrt.profiling.exec_profile import ExecutionProfiler
    cpu_time = [0.0]
    orig = cpu_segment.CpuSegment.run

    def timed(self, values):
        t = time.perf_counter()
        try:
            return orig(self, values)
        finally:
            cpu_time[0] += time.perf_counter() - t
    cpu_segment.CpuSegment.run = timed
    try:
        prof = ExecutionProfiler("basic")
        with qnnrt.load(program, residency="lazy",
                        options=qnnrt.LoadOptions(profile_level="basic", exec_profiler=prof)) as prog:
            m = prog.method()
            feed = feed_for(m)
            prog.run(m.name, feed)  # contexts created, caches warm
            walls, limits = [], []
            for _ in range(iterations):
                before = prof.to_json()["totals"]["qnn_execute_us"]
                cpu_time[0] = 0.0
                t = time.perf_counter()
                prog.run(m.name, feed)
                walls.append(time.perf_counter() - t)
                qnn_s = (prof.to_json()["totals"]["qnn_execute_us"] - before) / 1e6
                limits.append(qnn_s + cpu_time[0])
    finally:
        cpu_segment.CpuSegment.run = orig
    over = [(w - lim) / w for w, lim in zip(walls, limits)]
    return {"median_iteration_ms": statistics.median(walls) * 1e3,
            "median_limit_ms": statistics.median(limits) * 1e3,
            "median_overhead_pct": statistics.median(over) * 100}


def time_ort(program, method_file, feed, iterations, rounds):
    from qnnrt.compiler.compile import qnn_session
    t0 = time.perf_counter()
    sess = qnn_session(method_file)
    load = time.perf_counter() - t0
    out = sess.run(None, feed)
    times = []
    for _ in range(rounds):
        for _ in range(iterations):
            t = time.perf_counter()
            sess.run(None, feed)
            times.append(time.perf_counter() - t)
    names = [o.name for o in sess.get_outputs()]
    return {"load_s": load, "median_ms": statistics.median(times) * 1e3,
            "outputs": dict(zip(names, out))}


def peak_rss_child(program, residency, iterations) -> dict:
    code = f"""
import resource, sys, time, json
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
import qnnrt
from qnnrt.cli.io_files import random_inputs
times = []
with qnnrt.load({str(program)!r}, residency={residency!r}) as prog:
    m = prog.method(); feed = random_inputs(m.inputs, 0)
    prog.run(m.name, feed)
    for _ in range({iterations}):
        t = time.perf_counter(); prog.run(m.name, feed); times.append(time.perf_counter() - t)
    s = prog.pool.summary()
times.sort()
print(json.dumps({{"median_ms": times[len(times)//2] * 1e3,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "peak_live": s["peak_live"], "evictions": s["evictions"]}}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("program")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-ort", action="store_true")
    ap.add_argument("--only", choices=["ort", "overhead", "bounded", "first"], nargs="*")
    a = ap.parse_args()
    prog = Path(a.program)
    only = set(a.only or ["ort", "overhead", "bounded", "first"])
    manifest = json.loads((prog / "program.json").read_text())
    method_file = prog / manifest["methods"][0]["model"]
    n = len(manifest["contexts"])
    print(f"program {prog}: {n} context binaries, method file {method_file.name}")
    if "ort" in only and not a.skip_ort:
        ours = time_qnnrt(prog, "auto", a.iterations, a.rounds)
        ort_r = time_ort(prog, method_file, ours["feed"], a.iterations, a.rounds)
        ours2 = time_qnnrt(prog, "auto", a.iterations, a.rounds)  # again, to bracket ORT
        mq = statistics.median([ours["median_ms"], ours2["median_ms"]])
        diff = max(float(np.abs(ours["outputs"][k] - ort_r["outputs"][k]).max())
                   for k in ours["outputs"])
        print(f"| per-iteration latency | qnnrt auto {mq:.2f} ms | ORT QNN EP {ort_r['median_ms']:.2f} ms "
              f"| ratio {mq / ort_r['median_ms']:.3f} | max |qnnrt-ORT| {diff:.2e} |")
        print(f"| load | qnnrt first output {ours['first_output_s']:.2f} s | ORT session {ort_r['load_s']:.2f} s |")
    if "overhead" in only:
        o = overhead(prog, a.iterations)
        print("| overhead | " + " | ".join(f"{k} {v:.3f}" for k, v in o.items()) + " |")
    if "bounded" in only:
        k = max(1, n // 4)
        lazy = peak_rss_child(prog, "lazy", a.iterations)
        bounded = peak_rss_child(prog, f"bounded:{k}", a.iterations)
        print(f"| lazy | {lazy['median_ms']:.2f} ms | peak RSS {lazy['peak_rss_mb']:.0f} MB | "
              f"peak live {lazy['peak_live']} |")
        print(f"| bounded:{k} | {bounded['median_ms']:.2f} ms | peak RSS {bounded['peak_rss_mb']:.0f} MB | "
              f"peak live {bounded['peak_live']} | evictions {bounded['evictions']} |")
        print(f"bounded/lazy latency ratio: {bounded['median_ms'] / lazy['median_ms']:.3f}")
    if "first" in only:
        r = time_qnnrt(prog, "auto", a.iterations, 1)
        s = r["summary"]
        print(f"| auto | first output {r['first_output_s']:.2f} s | steady {r['median_ms']:.2f} ms/iter | "
              f"capacity {s['capacity_found']} | evictions {s['evictions']} | creates {s['creates']} |")


if __name__ == "__main__":
    main()
