"""Many injected transient failures in one long `qnnrt run`: all recovered, outputs identical to a
clean run, and what a recovery costs.

    python bench/recovery_soak.py PATH [--method M] [--iteration 200] [--every 20] [--code 1100]
        [--residency auto] [--json out.json]

Builds the fault-injection shim of the tests (tests/data/qnn_fault_shim.c, forwarding to the real
libQnnHtp), runs `qnnrt run PATH --check-repeat --output-dir` once clean and once with every
`--every`-th graphExecute failing with `--code` (and --max-recoveries set to the number injected),
compares every output file byte for byte and prints one JSON line: failures injected, recoveries,
median / max seconds per recovery (re-creation + the call's re-run), wall times of both runs.
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
sys.path.insert(0, str(ROOT))


def _run(shim, fail: str | None, out: Path, args: argparse.Namespace, budget: int) -> tuple[float, dict]:
    env = shim.env(fail)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "qnnrt.cli", "run", args.path, "--iteration", str(args.iteration),
           "--check-repeat", "--no-vet", "--quiet", "--backend-lib", str(shim.folder), "--residency",
           args.residency, "--output-dir", str(out), "--report", str(out) + ".json",
           "--max-recoveries", str(budget)] + (["--method", args.method] if args.method else [])
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return wall, json.loads(Path(str(out) + ".json").read_text())


def main() -> int:
    from tests.helpers.fault_shim import build_fault_shim
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path")
    p.add_argument("--method")
    p.add_argument("--iteration", type=int, default=200)
    p.add_argument("--every", type=int, default=20, help="fail every N-th graphExecute call")
    p.add_argument("--code", type=int, default=1100)
    p.add_argument("--residency", default="auto")
    p.add_argument("--json")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="qnnrt-recovery-soak-"))
    shim = build_fault_shim(work / "shim")
    clean_s, clean = _run(shim, None, work / "clean", args, 0)
    calls = clean["time_breakdown"]["graph_calls_per_iteration"] * args.iteration
    # the re-run of a failed call is a call too: the k-th failure lands on call every*k + (k - 1)
    fails = [args.every * k + k - 1 for k in range(1, calls // args.every + 1)]
    fails = [f for f in fails if f <= calls + len(fails)]
    spec = ",".join(map(str, fails)) + f":{args.code}"
    faulty_s, faulty = _run(shim, spec, work / "faulty", args, len(fails))
    files = sorted(f.name for f in (work / "clean").iterdir())
    same = files == sorted(f.name for f in (work / "faulty").iterdir()) and all(
        (work / "clean" / f).read_bytes() == (work / "faulty" / f).read_bytes() for f in files)
    rec = faulty["recoveries"]
    secs = [r["seconds"] for r in rec["records"] if r["succeeded"]]
    res = {"path": args.path, "iterations": args.iteration, "graph_calls": calls, "code": args.code,
           "injected": len(fails), "recoveries": rec["tried"], "succeeded": rec["succeeded"],
           "outputs_identical": same, "output_files": len(files),
           "check_repeat_mismatches": faulty["check_repeat"]["mismatches"],
           "recovery_s_median": round(statistics.median(secs), 4) if secs else None,
           "recovery_s_max": round(max(secs), 4) if secs else None,
           "wall_clean_s": round(clean_s, 2), "wall_faulty_s": round(faulty_s, 2),
           "creates_clean": clean["residency"]["creates"], "creates_faulty": faulty["residency"]["creates"],
           "load_average": os.getloadavg()}
    print(json.dumps(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0 if same and rec["succeeded"] == len(fails) else 1


if __name__ == "__main__":
    sys.exit(main())
