"""multi-pd:2 against one PD on the same program, both loaded in one process and run in alternating
blocks of iterations, so that whatever the machine does (a host that slows a core for a while, the
other core busy) falls on both alike: per pair of adjacent blocks the ratio of their medians, and
the median of those ratios (bench/RESULTS.md).

    python bench/multi_pd_paired.py PTE INPUT --backend-lib SHIM [--pairs 40] [--block 200] [--busy]

SHIM: the ExecuTorch kit's libQnnHtp.so with its no-op graphExecute (QNN_SHIM_REAL, QNN_SHIM_NO_FIX,
QNN_SHIM_KEEP_PLATFORM, QNN_SHIM_NOOP_EXEC=1, QNN_SHIM_COUNT=1, as bench/ab_multi_pd_load.sh sets
them). --pd-budget (default 400MB) is what makes the multi-PD copy take two PDs; the one-PD copy
is loaded after it, with the backend's own budget. With --busy a busy loop runs in a process of its own
for the whole run. The first iterations of each block (--settle) are not counted: the worker may
have gone to sleep during the other block.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import numpy as np

import qnnrt


def _block(program: qnnrt.Program, x: np.ndarray, n: int, settle: int) -> float:
    for _ in range(settle):
        program.run(None, [x])
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        program.run(None, [x])
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pte")
    ap.add_argument("input")
    ap.add_argument("--backend-lib", required=True)
    ap.add_argument("--pd-budget", default="400MB")
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--block", type=int, default=200)
    ap.add_argument("--settle", type=int, default=10)
    ap.add_argument("--busy", action="store_true")
    a = ap.parse_args()
    x = np.load(a.input)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if a.busy else None
    try:
        # the multi-PD copy first: its budget is this process's PD, which the other copy then shares
        with qnnrt.load(a.pte, residency="multi-pd:2", backend_lib=a.backend_lib,
                        options=qnnrt.LoadOptions(pd_budget=a.pd_budget)) as two, \
                qnnrt.load(a.pte, residency="eager", backend_lib=a.backend_lib) as one:
            pds = two.pool.summary()["pds"]
            if pds != 2:
                raise SystemExit(f"the multi-PD copy took {pds} PD(s), not 2: set --pd-budget")
            ones, twos = [], []
            for k in range(a.pairs):
                first, second = (one, two) if k % 2 == 0 else (two, one)
                t1 = _block(first, x, a.block, a.settle)
                t2 = _block(second, x, a.block, a.settle)
                ones.append(t1 if first is one else t2)
                twos.append(t2 if first is one else t1)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    ratios = sorted(t / o for t, o in zip(twos, ones))
    q = len(ratios) // 4
    print(f"{'busy' if a.busy else 'idle'}: one PD {statistics.median(ones) * 1e6:.0f} us, "
          f"multi-pd:2 {statistics.median(twos) * 1e6:.0f} us per iteration (medians of "
          f"{a.pairs} blocks of {a.block}); multi / one PD per pair: median "
          f"{statistics.median(ratios):.2f}x (quartiles {ratios[q]:.2f}-{ratios[-q - 1]:.2f}, "
          f"min {ratios[0]:.2f}, max {ratios[-1]:.2f})")


if __name__ == "__main__":
    main()
