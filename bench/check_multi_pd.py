"""Multi-PD at one PD's cost, in instructions (load-independent): the instructions of both
processes per iteration of `--residency multi-pd:2` (the main process and its PD worker, each
counted by callgrind over the same iterations) against one PD's (eager, in process), and one round
trip per PD worker per iteration. Exits 1 when the ratio is above --limit (1.15) or a worker made
more round trips than iterations.

    bash bench/anchor/setup.sh ANCHOR; . ANCHOR/env.sh; $ET_PY bench/make_chain_pte.py CHAIN
    python bench/check_multi_pd.py CHAIN/chain66_et.pte CHAIN/chain66_et_input_0.npy [--tree TREE] [--limit 1.15]

Both counts come from bench/callgrind_chain.py (the kit's no-op graphExecute; neither process
polls: QNNRT_SPIN_US=0, so what is counted is work, not waiting). The wall-time ratio, which this
2-vCPU machine's load moves, is bench/multi_pd_paired.py's (bench/RESULTS.md, issue 49).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run(args: list[str]) -> str:
    done = subprocess.run([sys.executable, str(HERE / "callgrind_chain.py"), *args],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"callgrind_chain.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pte")
    ap.add_argument("input")
    ap.add_argument("--graph-calls", type=int, default=66)
    ap.add_argument("--tree", help="a checkout whose qnnrt to count (default: this one)")
    ap.add_argument("--pd-budget", default="400MB", help="makes the program take two PDs")
    ap.add_argument("--limit", type=float, default=1.15)
    ap.add_argument("--iterations", default="50,150", help="the two counts differenced")
    a = ap.parse_args()
    common = [a.pte, "--inputs", a.input, "--graph-calls", str(a.graph_calls),
              "--iterations", a.iterations] + (["--tree", a.tree] if a.tree else [])
    one = _run(common)
    many = _run(common + ["--residency", "multi-pd:2", "--pd-budget", a.pd_budget, "--workers"])
    print(one + many, end="")
    one_pd = float(re.search(r"([0-9]+) per iteration", one).group(1))  # type: ignore[union-attr]
    both = float(re.search(r"([0-9]+) per iteration, main", many).group(1))  # type: ignore[union-attr]
    trips = [(json.loads(m.group(1)), int(m.group(2)))
             for m in re.finditer(r"round trips per worker: (\[[0-9, ]*\]) over ([0-9]+)", many)]
    ratio = both / one_pd
    extra = [(t, n) for ts, n in trips for t in ts if t > n + 1]   # + the first run, before the warm-up
    print(f"multi-pd:2 / one PD, instructions of all processes per iteration: {ratio:.3f}x "
          f"(limit {a.limit}x); round trips per worker {trips}")
    if not trips or extra:
        print(f"FAIL: more than one round trip per PD per iteration: {extra or 'none counted'}")
        return 1
    if ratio > a.limit:
        print(f"FAIL: {ratio:.3f}x > {a.limit}x")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
