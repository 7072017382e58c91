"""Runtime cost per graph call of qnnrt on a .pte, a program folder or an EPContext .onnx.

    python bench/bench_dispatch.py PATH [--method M] [--iterations 200] [--warm-up 5]
        [--residency eager] [--reference] [--inputs a.npy,b.npy] [--backend-lib LIB] [--json out.json]

Per iteration (median over >= 200), from the runtime's own counters on timed runs (Program.timed:
a perf_counter around each graphExecute C call and each CPU op, what `qnnrt run` reports as
time_breakdown):
    runtime cost per graph call = (iteration wall - inside graphExecute - CPU ops) / graph calls
and ExecuTorch's definition (its et_run.py counts its CPU kernels as runtime):
    (iteration wall - inside graphExecute) / graph calls
and "all in", of the timed runs and of untimed ones (Program's default, as ExecuTorch's runtime
runs: no clock read per step), interleaved one by one: median iteration wall / graph calls, and
the calling thread's CPU time per iteration / graph calls (mean; on a busy machine it is not
inflated by waiting for a core, as wall time is).

--reference      the step-by-step path (Program.compiled = False); its CPU segments are timed by a
                 wrapper around session.run (.pte kernels by the interpreter's own counter)
--trace FILE     trace the run into FILE (LoadOptions(trace=...)): what tracing costs when on; without it
                 the run is untraced (what a tree from before tracing runs too)
--backend-lib    libQnnHtp to load; with the ExecuTorch kit's shim (bench/anchor/README.md:
                 ANCHOR/qnn_sdk/lib/x86_64-linux-clang/libQnnHtp.so) and `QNN_SHIM_NOOP_EXEC=1` graphExecute
                 returns at once: qnnrt's own cost with an infinitely fast accelerator, free of
                 simulator noise (outputs are garbage; bench/RESULTS.md has the command)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

def make_inputs(method, paths: str | None) -> list[np.ndarray]:
    if paths:
        return [np.load(p) for p in paths.split(",")]
    rng = np.random.default_rng(0)
    return [rng.standard_normal(tuple(d or 1 for d in s.shape)).astype(s.dtype)
            if np.dtype(s.dtype).kind == "f" else np.zeros(tuple(d or 1 for d in s.shape), s.dtype)
            for s in method.inputs]


class _TimedSession:
    def __init__(self, sess, acc: list):
        self._s, self._acc = sess, acc

    def run(self, *a, **k):
        t = time.perf_counter()
        try:
            return self._s.run(*a, **k)
        finally:
            self._acc[0] += time.perf_counter() - t

    def __getattr__(self, k):
        return getattr(self._s, k)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--method")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--warm-up", type=int, default=5)
    ap.add_argument("--residency", default="eager")
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--backend-lib")
    ap.add_argument("--inputs")
    ap.add_argument("--json")
    ap.add_argument("--trace")
    a = ap.parse_args(argv)
    import qnnrt
    from qnnrt.runtime.method_spec import CpuStep
    null_execute = os.environ.get("QNN_SHIM_NOOP_EXEC") == "1"
    opts = {"options": qnnrt.LoadOptions(trace=a.trace)} if a.trace else {}
    prog = qnnrt.load(a.path, residency=a.residency, backend_lib=a.backend_lib, **opts)
    cpu_acc = [0.0]
    try:
        m = prog.method(a.method)
        feed = make_inputs(m, a.inputs)
        prog.compiled = False
        ref = prog.run(m.name, feed)
        prog.compiled = not a.reference
        got = prog.run(m.name, feed)  # builds the plan, creates the contexts
        prog.run(m.name, [f + 1 if f.dtype.kind == "f" else f for f in feed])
        same = all(np.array_equal(ref[k], got[k]) and ref[k].dtype == got[k].dtype for k in ref)
        print(f"outputs bit-identical to the reference path (and unchanged by a later run): {same}")
        if a.reference:
            for s in m.steps:
                if isinstance(s, CpuStep):
                    s.segment.session = _TimedSession(s.segment.session, cpu_acc)
        for timed in (True, False):
            prog.timed = timed
            for _ in range(a.warm_up):
                prog.run(m.name, feed)
        rows = []
        untimed: list[float] = []
        cpu = {True: 0.0, False: 0.0}
        pc, tt = time.perf_counter, time.thread_time
        proc0 = time.process_time()
        for i in range(2 * a.iterations):
            prog.timed = timed = i % 2 == 0
            cpu_acc[0] = 0.0
            c0 = tt()
            t0 = pc()
            prog.run(m.name, feed)
            wall = pc() - t0
            cpu[timed] += tt() - c0
            if not timed:
                untimed.append(wall)
                continue
            t = prog.timing
            rows.append((wall, t.accelerator_s, t.cpu_ops_s + cpu_acc[0], t.graph_calls))
        cpu_per_iteration = cpu[True] / a.iterations
        untimed_cpu_per_iteration = cpu[False] / a.iterations
        proc_per_iteration = (time.process_time() - proc0) / (2 * a.iterations)
        load = os.getloadavg()
    finally:
        prog.close()
    med = statistics.median
    calls = rows[0][3]
    rt = [(r[0] - r[1] - r[2]) / max(1, r[3]) * 1e6 for r in rows]
    res = {"path": a.path, "method": m.name, "path_kind": "reference" if a.reference else "plan",
           "traced": bool(a.trace),
           "null_execute": null_execute, "iterations": a.iterations, "graph_calls": calls,
           "wall_ms": med(r[0] for r in rows) * 1e3,
           "accelerator_ms": med(r[1] for r in rows) * 1e3,
           "cpu_ops_ms": med(r[2] for r in rows) * 1e3,
           "runtime_ms": med(r[0] - r[1] - r[2] for r in rows) * 1e3,
           "runtime_us_per_graph_call": med(rt),
           "runtime_us_per_graph_call_p10_p90": [float(np.percentile(rt, q)) for q in (10, 90)],
           "runtime_plus_cpu_us_per_graph_call": med((r[0] - r[1]) / max(1, r[3]) for r in rows) * 1e6,
           "cpu_us_per_graph_call": cpu_per_iteration / max(1, calls) * 1e6,
           "wall_us_per_graph_call": med(r[0] for r in rows) / max(1, calls) * 1e6,
           "untimed_wall_ms": med(untimed) * 1e3,
           "untimed_wall_us_per_graph_call": med(untimed) / max(1, calls) * 1e6,
           "untimed_cpu_us_per_graph_call": untimed_cpu_per_iteration / max(1, calls) * 1e6,
           "process_cpu_us_per_graph_call": proc_per_iteration / max(1, calls) * 1e6,
           "loadavg": [round(x, 2) for x in load]}
    print(f"{a.path} [{m.name}] {res['path_kind']}{' null-execute' if null_execute else ''}: "
          f"{calls} graph calls/iteration, {a.iterations} iterations, load {res['loadavg']}")
    print(f"  wall {res['wall_ms']:.2f} ms | graphExecute {res['accelerator_ms']:.2f} ms | CPU ops "
          f"{res['cpu_ops_ms']:.2f} ms | runtime {res['runtime_ms']:.2f} ms (medians)")
    print(f"  runtime cost per graph call: {res['runtime_us_per_graph_call']:.2f} us (p10 "
          f"{res['runtime_us_per_graph_call_p10_p90'][0]:.2f}, p90 "
          f"{res['runtime_us_per_graph_call_p10_p90'][1]:.2f}); incl. CPU ops: "
          f"{res['runtime_plus_cpu_us_per_graph_call']:.2f} us")
    print(f"  all in, timed (median wall / graph calls; this thread's CPU time): "
          f"{res['wall_us_per_graph_call']:.2f} us; {res['cpu_us_per_graph_call']:.2f} us")
    print(f"  all in, untimed (Program's default): wall {res['untimed_wall_ms']:.3f} ms, "
          f"{res['untimed_wall_us_per_graph_call']:.2f} us per graph call; this thread's CPU time "
          f"{res['untimed_cpu_us_per_graph_call']:.2f} us (all threads, both kinds: "
          f"{res['process_cpu_us_per_graph_call']:.2f} us)")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
