"""Fuzz qnnrt's readers by hand: `python tools/fuzz.py --per-reader 2000 --seed 1`.

Builds tiny seeds (tests/fuzz/corpus.py), writes mutated inputs under --work, runs each through
qnnrt.load + one run in child processes (tests/fuzz/runner.py) and prints a table per reader:
ok / clean QnnrtError / other exception / native crash / hang, then every bad case."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz.corpus import READERS, make_cases, make_seeds
from tests.fuzz.runner import run_cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-reader", type=int, default=200)
    ap.add_argument("--readers", default=",".join(READERS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default=None, help="folder for seeds and cases (default: a temp dir)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case before 'hang'")
    ap.add_argument("--json", help="write every outcome here")
    ap.add_argument("--jsonl", help="append each outcome here as it comes (usable mid-run)")
    ap.add_argument("--keep", action="store_true", help="keep the cases")
    args = ap.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="qnnrt-fuzz-"))
    seeds = make_seeds(work)
    cases_dir = work / f"cases_{args.seed}"
    shutil.rmtree(cases_dir, ignore_errors=True)
    readers = args.readers.split(",")
    by_reader = [make_cases([r], args.per_reader, args.seed, seeds, cases_dir) for r in readers]
    cases = [c for group in zip(*by_reader) for c in group]  # interleaved: a partial run covers all
    cache = work / "cache"  # fresh vetting verdicts for every run
    shutil.rmtree(cache, ignore_errors=True)
    stream = open(args.jsonl, "a") if args.jsonl else None

    def log(o) -> None:
        if o.kind in ("other", "crash", "hang"):
            print(f"  {o.kind}: {o.case.reader} #{o.case.index} ({o.case.mutation}): {o.detail}",
                  flush=True)
        if stream:
            stream.write(json.dumps({"reader": o.case.reader, "index": o.case.index, "seed": args.seed,
                                     "mutation": o.case.mutation, "kind": o.kind,
                                     "detail": o.detail}) + "\n")
            stream.flush()
    s = run_cases(cases, args.timeout, env={"QNNRT_CACHE_DIR": str(cache)}, log=log)
    print(f"\n{len(cases)} cases in {s.seconds:.0f} s, {s.children} child process(es)")
    print(f"{'reader':8} {'tried':>6} {'ok':>6} {'clean':>6} {'other':>6} {'crash':>6} {'hang':>6}")
    for r, c in s.table().items():
        print(f"{r:8} {sum(c.values()):6} {c['ok']:6} {c['clean']:6} {c['other']:6} {c['crash']:6} "
              f"{c['hang']:6}")
    if args.json:
        Path(args.json).write_text(json.dumps([{"reader": o.case.reader, "index": o.case.index,
                                                "mutation": o.case.mutation, "kind": o.kind,
                                                "detail": o.detail} for o in s.outcomes], indent=1))
    if not args.keep:
        shutil.rmtree(cases_dir, ignore_errors=True)
    return 1 if s.bad() else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
