"""ExecuTorch's own cost per graph call, measured like bench_dispatch.py's "all in": the calling
thread's CPU time per iteration / graph calls (not inflated by waiting for a core on a busy
machine). Run with the no-op graphExecute of the ExecuTorch kit (bench/anchor: `bash bench/anchor/setup.sh
ANCHOR` once):

    . ANCHOR/env.sh; QNN_SHIM_NOOP_EXEC=1 QNN_SHIM_COUNT=1 \\
        $ET_PY bench/bench_et_cpu.py chain66_et.pte --inputs chain66_et_input_0.npy --graph-calls 66
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
from executorch.runtime import Runtime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pte")
    ap.add_argument("--method", default="forward")
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--graph-calls", type=int, required=True, help="graph calls per iteration")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--warm-up", type=int, default=5)
    a = ap.parse_args()
    meth = Runtime.get().load_program(a.pte).load_method(a.method)
    xs = [torch.from_numpy(np.load(p)) for p in a.inputs.split(",")]
    for _ in range(a.warm_up):
        meth.execute(xs)
    wall = []
    cpu0, proc0 = time.thread_time(), time.process_time()
    for _ in range(a.iterations):
        t = time.perf_counter()
        meth.execute(xs)
        wall.append(time.perf_counter() - t)
    cpu = (time.thread_time() - cpu0) / a.iterations
    proc = (time.process_time() - proc0) / a.iterations
    print(f"ExecuTorch {a.pte} [{a.method}]: {a.iterations} iterations, load {os.getloadavg()}")
    print(f"  wall median {statistics.median(wall) * 1e3:.3f} ms; all in (this thread's CPU time per "
          f"iteration / graph calls): {cpu / a.graph_calls * 1e6:.2f} us (all threads: "
          f"{proc / a.graph_calls * 1e6:.2f} us)")


if __name__ == "__main__":
    main()
