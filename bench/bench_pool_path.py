"""The pool path's own cost: one `acquire` + `release` per graph call with every context live (what
a plan pays per call before its contexts are all live, and always under sequential / evicting
policies), per residency policy. No graph runs, so the simulator adds nothing.

    python bench/bench_pool_path.py PROGRAM [--policies lazy,auto,bounded:12] [--calls 2000] [--rounds 7]
PROGRAM: e.g. the chain of bench/make_chain_program.py. Prints the median and the minimum over the
rounds, in microseconds of the calling thread's CPU time per acquire + release (on a busy machine
it is not inflated by waiting for a core, as wall time is).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_call_us(path: str, policy: str, calls: int, rounds: int) -> list[float]:
    import qnnrt
    with qnnrt.load(path, residency=policy) as prog:
        m = prog.method()
        inputs = {s.name: np.zeros(tuple(d or 1 for d in s.shape), s.dtype) for s in m.inputs}
        prog.run(None, inputs)
        prog.run(None, inputs)   # every context live, the prefetches settled
        pool, order = prog.pool, list(m.graph_order)
        pool.set_order(order)
        out = []
        for _ in range(rounds):
            t0 = time.thread_time()
            for _ in range(calls):
                for i, key in enumerate(order):
                    pool.acquire(key, i)
                    pool.release(key, i)
            out.append((time.thread_time() - t0) / (calls * len(order)) * 1e6)
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("program")
    ap.add_argument("--policies", default="lazy,auto,bounded:12")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    for policy in a.policies.split(","):
        us = per_call_us(a.program, policy, a.calls, a.rounds)
        print(f"{policy:12s} {statistics.median(us):6.2f} us per acquire + release (min {min(us):.2f})")


if __name__ == "__main__":
    main()
