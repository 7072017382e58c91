"""Per-iteration time of one PD that evicts (`auto --max-pds 1`) vs multi-PD (every context
resident) vs the limit (time inside graphExecute + CPU ops of the same iteration).

    nice -n 10 python bench/bench_multi_pd.py ~/.cache/qnnrt/demo/pd --iterations 5
    nice -n 10 python bench/bench_multi_pd.py /tmp/pd2 --method decode --iterations 10
    # the channel on a chain of small graphs: in-process (lazy, one PD) vs forced over 2 PDs
    nice -n 10 python bench/bench_multi_pd.py ~/.cache/qnnrt/demo/tiny --residency multi-pd:2 \
        --pd-budget 1GiB --baseline lazy --iterations 20
    # the same without the simulator's time: the ExecuTorch kit's shim's no-op graphExecute
    # (. ANCHOR/env.sh, ANCHOR made by `bash bench/anchor/setup.sh ANCHOR`; bench/anchor/README.md)
    QNN_SHIM_NO_FIX=1 QNN_SHIM_KEEP_PLATFORM=1 QNN_SHIM_NOOP_EXEC=1 QNN_SHIM_COUNT=1 nice -n 10 \
        python bench/bench_multi_pd.py ~/.cache/qnnrt/demo/tiny --residency multi-pd:2 \
        --pd-budget 1GiB --baseline lazy --iterations 200 --warm-up 5 \
        --backend-lib $QNNRT_ANCHOR/qnn_sdk/lib/x86_64-linux-clang/libQnnHtp.so
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import qnnrt


def _feeds(m) -> dict:
    rng = np.random.default_rng(0)
    return {s.name: rng.standard_normal([d or 1 for d in s.shape]).astype(s.dtype) for s in m.inputs}


def measure(path: str, residency: str, max_pds: int, method: str | None, iterations: int,
            warm_up: int, pd_budget: str | None, backend_lib: str | None = None) -> dict:
    opts = qnnrt.LoadOptions(max_pds=max_pds, pd_budget=pd_budget)
    t0 = time.perf_counter()
    with qnnrt.load(path, residency=residency, options=opts, backend_lib=backend_lib) as p:
        load_s = time.perf_counter() - t0
        p.timed = True   # the limit is the time inside graphExecute and in CPU ops
        m = p.method(method)
        feeds = _feeds(m)
        for _ in range(warm_up):
            out = p.run(m.name, feeds)
        s0 = p.pool.summary()
        creates0 = s0["creates"]
        trips0 = sum(w["round_trips"] or 0 for w in s0.get("pd_workers", []))
        its, limit, runtime = [], [], []
        for _ in range(iterations):
            t = time.perf_counter()
            out = p.run(m.name, feeds)
            its.append(time.perf_counter() - t)
            limit.append(p.timing.accelerator_s + p.timing.cpu_ops_s)
            runtime.append((its[-1] - limit[-1]) / max(1, p.timing.graph_calls))
        s = p.pool.summary()
    return {"name": f"{residency}, max_pds {max_pds}", "pds": s.get("pds", 1), "load_s": load_s,
            "runtime_us_per_call": statistics.median(runtime) * 1e6,
            "iteration_ms": statistics.median(its) * 1e3, "limit_ms": statistics.median(limit) * 1e3,
            "creates_per_iteration": (s["creates"] - creates0) / iterations,
            "round_trips_per_iteration": (sum(w["round_trips"] or 0 for w in s.get("pd_workers", []))
                                          - trips0) / iterations,
            "channel_us": ["in-process" if w["in_process"] else w["channel_us_per_round_trip"]
                           for w in s.get("pd_workers", [])],
            "out": out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("program")
    ap.add_argument("--method")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--warm-up", type=int, default=1)
    ap.add_argument("--max-pds", type=int, default=4)
    ap.add_argument("--residency", default="auto", help="the multi-PD side (default auto)")
    ap.add_argument("--baseline", default="auto", help="the one-PD side, run with max_pds 1")
    ap.add_argument("--pd-budget")
    ap.add_argument("--rounds", type=int, default=1, help="alternate the two sides this many times; "
                    "the best round of each is reported")
    ap.add_argument("--backend-lib", help="e.g. the anchor shim with QNN_SHIM_NOOP_EXEC=1: a "
                    "graphExecute that returns at once, so only the runtime's own cost remains")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}")
    runs: dict[str, list[dict]] = {"one": [], "multi": []}
    for _ in range(args.rounds):   # alternated: a change of load hits both sides alike
        runs["one"].append(measure(args.program, args.baseline, 1, args.method, args.iterations,
                                   args.warm_up, args.pd_budget, args.backend_lib))
        runs["multi"].append(measure(args.program, args.residency, args.max_pds, args.method,
                                     args.iterations, args.warm_up, args.pd_budget, args.backend_lib))
    one = min(runs["one"], key=lambda r: r["iteration_ms"])
    multi = min(runs["multi"], key=lambda r: r["iteration_ms"])
    if args.rounds > 1:
        for side, rs in runs.items():
            print(f"{side}: per-iteration ms by round: " + ", ".join(f"{r['iteration_ms']:.3f}" for r in rs))
    same = all(np.array_equal(one["out"][k], multi["out"][k]) for k in one["out"])
    print("| residency | PDs | load s | per-iteration ms (median) | limit ms | vs limit | creations "
          "per iteration | round trips per iteration | runtime us per graph call | channel us per "
          "round trip (per PD) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in (one, multi):
        print(f"| {r['name']} | {r['pds']} | {r['load_s']:.1f} | {r['iteration_ms']:.3f} | "
              f"{r['limit_ms']:.3f} | {r['iteration_ms'] / r['limit_ms']:.3f}x | "
              f"{r['creates_per_iteration']:g} | {r['round_trips_per_iteration']:g} | "
              f"{r['runtime_us_per_call']:.1f} | {', '.join(str(c) for c in r['channel_us']) or '-'} |")
    print(f"multi-PD / one PD per iteration: {multi['iteration_ms'] / one['iteration_ms']:.3f}")
    print(f"multi-PD vs one PD per iteration: {one['iteration_ms'] / multi['iteration_ms']:.2f}x faster; "
          f"outputs bit-identical: {same}")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
