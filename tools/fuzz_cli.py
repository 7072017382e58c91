"""Fuzz the command line by hand: run `qnnrt inspect` and `qnnrt run --iteration 1` on mutated inputs
(case folders made by tools/fuzz.py --keep) and classify each: exit 0, a clean error (exit 1, one
message), a traceback on stderr, a crash the worker process contained, any other exit, or a hang.

    python tools/fuzz_cli.py CASES_DIR [--per-reader N] [--timeout S] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = {"bin": "model.bin", "epc0": "model_ctx.onnx", "epc1": "model_ctx.onnx", "program": "prog",
          "pte": "model.pte"}


def classify(r: subprocess.CompletedProcess) -> str:
    if "Traceback (most recent call last)" in r.stderr:
        return "traceback"
    if r.returncode == 0:
        return "ok"
    if r.returncode == 1:
        return "contained crash" if "crashed (SIG" in r.stderr else "clean error"
    return f"exit {r.returncode}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", type=Path)
    ap.add_argument("--per-reader", type=int, default=40)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--json")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    table: dict[tuple[str, str], Counter] = {}
    rows = []
    t0 = time.perf_counter()
    for reader, target in TARGET.items():
        dirs = sorted(args.cases.glob(f"{reader}_*"))[:args.per_reader]
        for d in dirs:
            path = d / target
            for cmd in (["inspect", str(path)], ["run", str(path), "--iteration", "1", "--quiet"]):
                try:
                    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", *cmd], capture_output=True,
                                       text=True, timeout=args.timeout, env=env, cwd=str(ROOT))
                    kind = classify(r)
                    tail = r.stderr.strip().splitlines()[-1:] if kind != "ok" else []
                except subprocess.TimeoutExpired:
                    kind, tail = "hang", []
                table.setdefault((reader, cmd[0]), Counter())[kind] += 1
                rows.append({"case": d.name, "command": cmd[0], "kind": kind, "stderr_tail": tail})
    print(f"{len(rows)} CLI runs in {time.perf_counter() - t0:.0f} s")
    for (reader, cmd), c in sorted(table.items()):
        print(f"  {reader:8s} {cmd:8s} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if not any(r["kind"] in ("traceback", "hang") or r["kind"].startswith("exit") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
