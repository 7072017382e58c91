"""The per-call cost of the shared-buffer binding, without the simulator: the same program run on
raw client buffers and on shared buffers (rpcmem, mem handles), both through the tests' emulation
(tests/helpers/mem_shim.py) with QNNRT_MEM_SHIM_NOOP=1, so graphExecute runs nothing and what
remains is qnnrt's own work per run (plus the shim's unwrapping of mem handles, which a device's
QNN does in its own way).

    python bench/bench_shared_buffers.py [PTE [METHOD]] [--runs 2000] [--rounds 5]

Raw and shared are loaded side by side and timed in interleaved rounds; prints the median
microseconds per run and per graph call of each, and how many tensors the shared path bound.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_PTE = ROOT / "tests" / "data" / "executorch" / "many_4_fp16" / "model.pte"


def _time(prog, method: str, feed: dict, runs: int) -> float:
    pc = time.perf_counter
    t0 = pc()
    for _ in range(runs):
        prog.run(method, feed)
    return (pc() - t0) / runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pte", nargs="?", default=str(DEFAULT_PTE))
    ap.add_argument("method", nargs="?", default=None)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    from tests.helpers.mem_shim import build_mem_shim
    with tempfile.TemporaryDirectory() as d:
        shim = build_mem_shim(Path(d))
        os.environ.update(shim.env(), QNNRT_MEM_SHIM_NOOP="1")
        import qnnrt
        opts = {name: qnnrt.LoadOptions(vet=False, residency="eager", backend_lib=str(shim.folder),
                                        shared_buffer=shared)
                for name, shared in (("raw", False), ("shared", True))}
        progs = {name: qnnrt.load(a.pte, options=o) for name, o in opts.items()}
        try:
            m = progs["raw"].method(a.method)
            feed = {s.name: np.zeros([x or 1 for x in s.shape], s.dtype) for s in m.inputs}
            for p in progs.values():
                _time(p, m.name, feed, 50)   # plans built, contexts live
            calls = progs["raw"].timing.graph_calls
            before = shim.counts()["bound_tensors"]
            progs["shared"].run(m.name, feed)
            bound = shim.counts()["bound_tensors"] - before
            samples: dict[str, list[float]] = {n: [] for n in progs}
            for _ in range(a.rounds):
                for n, p in progs.items():
                    samples[n].append(_time(p, m.name, feed, a.runs))
            sb = progs["shared"].performance.to_json()["shared_buffers"]
            assert sb["on"], sb
        finally:
            for p in progs.values():
                p.close()
    print(f"{Path(a.pte).name} method {m.name}: {calls} graph calls per run, {bound} tensors bound "
          f"as mem handles per run, {sb['buffers']} rpcmem buffers")
    for n, s in samples.items():
        med = statistics.median(s) * 1e6
        print(f"  {n:7s} {med:8.1f} us per run, {med / max(calls, 1):6.1f} us per graph call "
              f"(median of {a.rounds} rounds of {a.runs})")


if __name__ == "__main__":
    main()
