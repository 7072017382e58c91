"""Per-iteration median of one residency on a program, in a process of its own: run it alternately
for several residencies and trees (PYTHONPATH) to compare them in one sitting.

    . ANCHOR/env.sh      # the ExecuTorch kit, made by `bash bench/anchor/setup.sh ANCHOR` (bench/anchor/README.md)
    export QNN_SHIM_NO_FIX=1 QNN_SHIM_KEEP_PLATFORM=1 QNN_SHIM_NOOP_EXEC=1 QNN_SHIM_COUNT=1
    for i in 1 2 3 4 5 6; do for r in eager multi-pd:2; do
      python bench/ab_multi_pd_noop.py chain66_et.pte chain66_et_input_0.npy $r \\
        --backend-lib $QNNRT_ANCHOR/qnn_sdk/lib/x86_64-linux-clang/libQnnHtp.so; done; done
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import qnnrt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("program")
    ap.add_argument("input")
    ap.add_argument("residency")
    ap.add_argument("--backend-lib")
    ap.add_argument("--pd-budget", default="400MB")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--warm-up", type=int, default=20)
    a = ap.parse_args()
    x = np.load(a.input)
    with qnnrt.load(a.program, residency=a.residency, backend_lib=a.backend_lib,
                    options=qnnrt.LoadOptions(pd_budget=a.pd_budget)) as p:
        for _ in range(a.warm_up):
            p.run(None, [x])
        ts = []
        for _ in range(a.iterations):
            t0 = time.perf_counter()
            p.run(None, [x])
            ts.append(time.perf_counter() - t0)
        trips = sum(w.get("round_trips") or 0 for w in p.pool.summary().get("pd_workers", []))
    print(f"{a.residency}: {statistics.median(ts) * 1e3:.3f} ms per iteration (median), "
          f"{trips / (a.iterations + a.warm_up):g} round trips per iteration")


if __name__ == "__main__":
    main()
