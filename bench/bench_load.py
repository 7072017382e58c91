"""Load time of an LLM .pte a second time (issue 29's load cache): `qnnrt.load` + `LlmRunner`
(contexts created when made) with the load cache on and off, interleaved per round in one process,
after one warm-up load that fills every cache (vetting verdicts, the load cache); optionally the
time to first token of a one-token generation on the backend (the real simulator by default).

    python bench/bench_load.py MODEL.pte [--rounds 5] [--ttft] [--backend-lib LIB]
    python bench/bench_load.py MODEL.pte --modes off --profile     # where one warm load goes
    PYTHONPATH=<tree before the cache> python bench/bench_load.py MODEL.pte --modes before

`off` is `QNNRT_LOAD_CACHE=0`: the sha256 and the PD-need scan computed on every load, as before
the cache; `before` is an older tree (the variable means nothing there).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def one_load(path: str, mode: str, backend_lib: str | None, ttft: bool) -> dict:
    import qnnrt
    from qnnrt.llm import LlmRunner
    os.environ["QNNRT_LOAD_CACHE"] = "0" if mode == "off" else "1"
    t0 = time.perf_counter()
    prog = qnnrt.load(path, backend_lib=backend_lib)
    try:
        t1 = time.perf_counter()
        runner = LlmRunner(prog, create_contexts=True)
        t2 = time.perf_counter()
        row = {"mode": mode, "load_ms": (t1 - t0) * 1e3, "runner_ms": (t2 - t1) * 1e3,
               "total_ms": (t2 - t0) * 1e3}
        if ttft:
            res = runner.generate([1, 2, 3, 4, 5, 6, 7, 8], 1, eos_ids=[])
            row["ttft_ms"] = res.ttft_s * 1e3
        return row
    finally:
        prog.close()


def _profile(path: str, mode: str, backend_lib: str | None) -> int:
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    row = one_load(path, mode, backend_lib, False)
    prof.disable()
    print(json.dumps(row))
    pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pte")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", default="off,on")
    ap.add_argument("--ttft", action="store_true")
    ap.add_argument("--backend-lib")
    ap.add_argument("--profile", action="store_true", help="cProfile one warm load of the last mode")
    args = ap.parse_args()
    modes = args.modes.split(",")
    one_load(args.pte, modes[-1], args.backend_lib, False)   # warm-up: every cache filled
    if args.profile:
        return _profile(args.pte, modes[-1], args.backend_lib)
    rows = [one_load(args.pte, m, args.backend_lib, args.ttft) for _ in range(args.rounds) for m in modes]
    med = {m: {k: round(statistics.median(r[k] for r in rows if r["mode"] == m), 2)
               for k in rows[0] if k != "mode"} for m in modes}
    print(json.dumps({"pte": args.pte, "size": os.path.getsize(args.pte), "rounds": rows,
                      "median": med, "python": sys.version.split()[0],
                      "qnnrt": os.path.dirname(__import__("qnnrt").__file__)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
