"""What vetting costs on the first run of a model not seen before (by hand; results in
bench/RESULTS.md and docs/RELIABILITY.md, "Vetting cost").

  python bench/vet_cost.py ARTIFACT [--inputs a.npy,b.npy] [--via api,cli] [--modes off,default]
                           [--rounds 1] [--json out.json]

Each measurement is a fresh process on a fresh QNNRT_CACHE_DIR (no cached verdict, no learned PD
budget), timing load + the first iteration:
- api: `qnnrt.load(path, options=LoadOptions(vet=...))` then one `run`; modes off (vet=False),
  default (True = "auto": info + create in a child, cheap graphs run there), execute, create;
- cli: `qnnrt run path --iteration 1` (its spawned worker is the isolation: mode "worker", no
  child) against `--no-vet`; modes off and default only.
Rounds interleave the modes (off, default, off, default, ...) so a changing machine load hits both.
Prints one row per run and the overhead of each mode against off (medians over rounds), and the
load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

API_CODE = r"""
import json, sys, time
import numpy as np
t0 = time.perf_counter()
import qnnrt
path, inputs, vet = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
prog = qnnrt.load(path, options=qnnrt.LoadOptions(vet=vet))
t1 = time.perf_counter()
m = prog.method()
feed = ([np.load(f) for f in inputs.split(",")] if inputs else
        {s.name: np.zeros([d or 1 for d in s.shape], s.dtype) for s in m.inputs})
prog.run(m.name, feed)
t2 = time.perf_counter()
rep = prog.vet_reports[0].to_json() if prog.vet_reports else {}
prog.close()
print(json.dumps({"load_s": t1 - t0, "first_iteration_s": t2 - t1, "total_s": t2 - t0, "vetting": rep}))
"""

API_VET = {"off": False, "default": True, "execute": "execute", "create": "create"}


def _env() -> dict:
    env = dict(os.environ, QNNRT_CACHE_DIR=tempfile.mkdtemp(prefix="qnnrt-vetcost-"))
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_api(path: str, inputs: str, mode: str) -> dict:
    r = subprocess.run([sys.executable, "-c", API_CODE, path, inputs, json.dumps(API_VET[mode])],
                       capture_output=True, text=True, env=_env())
    if r.returncode != 0:
        raise SystemExit(f"api {mode} failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_cli(path: str, inputs: str, mode: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        rep = os.path.join(tmp, "r.json")
        cmd = [sys.executable, "-m", "qnnrt", "run", path, "--iteration", "1", "--report", rep,
               "--quiet"] + (["--inputs", inputs] if inputs else []) + (["--no-vet"] if mode == "off" else [])
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, env=_env())
        total = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"cli {mode} failed: {r.stderr[-2000:]}")
        data = json.loads(Path(rep).read_text())
    return {"load_s": data["load_s"], "first_iteration_s": data["first_output_s"] - data["load_s"],
            "total_s": total, "vetting": data["vetting"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--inputs", default="")
    ap.add_argument("--via", default="api,cli")
    ap.add_argument("--modes", default="off,default")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    print(f"load average before: {os.getloadavg()}", flush=True)
    for rnd in range(args.rounds):
        for via in args.via.split(","):
            for mode in args.modes.split(","):
                if via == "cli" and mode not in ("off", "default"):
                    continue
                r = (run_api if via == "api" else run_cli)(args.path, args.inputs, mode)
                r.update(via=via, mode=mode, round=rnd, loadavg=os.getloadavg()[0])
                rows.append(r)
                print(f"{via:4} {mode:8} round {rnd}: load {r['load_s']:8.2f} s, first iteration "
                      f"{r['first_iteration_s']:8.2f} s, process total {r['total_s']:8.2f} s, "
                      f"load avg {r['loadavg']:.1f}, vetting {r['vetting']}", flush=True)
    def med(via: str, mode: str) -> float | None:
        xs = [r["load_s"] + r["first_iteration_s"] for r in rows if r["via"] == via and r["mode"] == mode]
        return statistics.median(xs) if xs else None
    for via in args.via.split(","):
        off = med(via, "off")
        for mode in args.modes.split(","):
            m = med(via, mode)
            if m is not None and off:
                print(f"{via}: {mode}: load + first iteration {m:.2f} s, {100 * (m / off - 1):+.1f} % vs off")
    print(f"load average after: {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
