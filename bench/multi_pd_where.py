"""Where a multi-PD iteration's time goes, in one process: the iteration, the segment step (the main
process's side of the worker's run), its round trip on the channel, the worker's own time in it
(from its reply), the channel's cost (round trip minus the worker's time) and the rest (this
process's own part of the plan). Medians over the timed iterations; run it in each tree
(PYTHONPATH) to compare.

    QNN_SHIM_REAL=... QNN_SHIM_NO_FIX=1 QNN_SHIM_KEEP_PLATFORM=1 QNN_SHIM_NOOP_EXEC=1 \\
      python bench/multi_pd_where.py CHAIN/chain66_et.pte CHAIN/chain66_et_input_0.npy \\
      --backend-lib ANCHOR/qnn_sdk/lib/x86_64-linux-clang/libQnnHtp.so [--busy]

`--busy` keeps the other core busy (a busy loop in a process of its own) while it runs. `--cores
one|two` pins this process to core 0 and its worker to core 0 or 1 (Linux): what sharing a core
costs each part.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import qnnrt
from qnnrt.runtime.hosts.pd import channel as ch
from qnnrt.runtime.hosts.pd.segment import RemoteSegment


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("program")
    ap.add_argument("input")
    ap.add_argument("--backend-lib")
    ap.add_argument("--pd-budget", default="400MB")
    ap.add_argument("--iterations", type=int, default=600)
    ap.add_argument("--warm-up", type=int, default=30)
    ap.add_argument("--busy", action="store_true")
    ap.add_argument("--cores", choices=["one", "two"], help="pin both processes to one core or two")
    a = ap.parse_args()
    trips: list[tuple[float, float]] = []   # (round trip, the worker's own time)
    steps: list[float] = []
    segment, run = ch.Channel.segment, RemoteSegment.run

    def timed_segment(self: ch.Channel, *args, **kw) -> bytes:
        t0 = time.perf_counter()
        frame = segment(self, *args, **kw)
        trips.append((time.perf_counter() - t0, ch.parse_done(frame)[2]))
        return frame

    def timed_run(self: RemoteSegment, values: list) -> float:
        t0 = time.perf_counter()
        out = run(self, values)
        steps.append(time.perf_counter() - t0)
        return out
    ch.Channel.segment = timed_segment          # type: ignore[method-assign]
    RemoteSegment.run = timed_run               # type: ignore[method-assign]
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if a.busy else None
    try:
        x = np.load(a.input)
        with qnnrt.load(a.program, residency="multi-pd:2", backend_lib=a.backend_lib,
                        options=qnnrt.LoadOptions(pd_budget=a.pd_budget)) as p:
            if a.cores is not None:
                os.sched_setaffinity(0, {0})
                for w in p.pool.summary()["pd_workers"]:
                    if not w["in_process"]:
                        os.sched_setaffinity(w["pid"], {0} if a.cores == "one" else {1})
            for _ in range(a.warm_up):
                p.run(None, [x])
            trips.clear()
            steps.clear()
            its = []
            for _ in range(a.iterations):
                t0 = time.perf_counter()
                p.run(None, [x])
                its.append(time.perf_counter() - t0)
            waits = [s.wait for s in p.plan().steps if isinstance(s, RemoteSegment)]
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()

    def us(v: list[float]) -> str:
        return f"{statistics.median(v) * 1e6:.1f}"
    line = (f"iteration {us(its)} us | segment step {us(steps)} | round trip {us([r for r, _ in trips])}"
            f" | worker's own {us([b for _, b in trips])} | channel {us([r - b for r, b in trips])}"
            f" (p90 {np.percentile([r - b for r, b in trips], 90) * 1e6:.1f})"
            f" | this process's part {us([i - s for i, s in zip(its, steps)])}")
    for w in waits:
        pol = getattr(w, "policy", None)
        if pol is not None:   # trees with a wait policy: its choice, its medians, the polls that ran out
            med = {k: statistics.median(v) * 1e6 if v else float("nan") for k, v in pol.costs.items()}
            line += (f" | waits {'block' if pol.block else 'poll'} (round trip polled {med[False]:.0f}, "
                     f"blocked {med[True]:.0f} us; {w.blocked} of {pol.waits} polls ran out)")
    cores = f", {a.cores} core(s)" if a.cores else ""
    print(line + f" | {'busy' if a.busy else 'idle'}{cores}, load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
