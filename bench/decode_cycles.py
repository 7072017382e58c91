"""Simulated HTP cycles per decoded token of LLM files (an ExecuTorch .pte, a Genie bundle), each through
`qnnrt llm` under QNN's detailed profile: the raw figure (the decode phase's profiled cycles over the tokens)
and the floor (each graph call at its graph's fewest cycles of the run, summed over the decode calls: the
simulated cost without a loaded host's stalls; qnnrt/cli/llm.py's add_floor_cycles), the files alternating
over --rounds, the same prompt tokens and count for all.

    PYTHONPATH=. python bench/decode_cycles.py ET/model.pte BUNDLE --soc SM8650 --rounds 2
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "504,3575,282,4649,314,7042,30,1,2,3"     # 10 tokens: one prefill call of either file


def profile(model: Path, soc: str, n: int) -> dict:
    """One `qnnrt llm` run of ``n`` new tokens under the detailed profile: its report's figures."""
    with tempfile.TemporaryDirectory(prefix="cycles-") as d:
        report = Path(d) / "r.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "QNNRT_CACHE_DIR": os.environ.get("QNNRT_CACHE_DIR", d)}
        done = subprocess.run([sys.executable, "-m", "qnnrt.cli", "llm", str(model), "--prompt-tokens", PROMPT,
                               "--max-new-tokens", str(n), "--ignore-eos", "--soc", soc, "--profile-level", "detailed",
                               "--profile-path", str(Path(d) / "p.json"), "--report", str(report)],
                              capture_output=True, text=True, env=env)
        if done.returncode:
            sys.exit(f"{model}: {done.stderr[-2000:]}")
        r = json.loads(report.read_text())
    return {"cycles_per_token": r["accel_cycles_per_decoded_token"],
            "floor_per_token": r.get("accel_cycles_floor_per_decoded_token"),
            "graph_calls_per_token": sum(r["decode_executions"].values()) / (r["n_generated"] - 1),
            "load": round(os.getloadavg()[0], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", type=Path, nargs="+")
    ap.add_argument("--soc", default="SM8650")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=12)
    args = ap.parse_args()
    rows = []
    for r in range(1, args.rounds + 1):
        for model in args.models:
            row = {"round": r, "model": str(model), **profile(model, args.soc, args.max_new_tokens)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("| file | round | cycles / token (profiled) | floor cycles / token | graph calls / token | load |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['model']} | {row['round']} | {row['cycles_per_token'] / 1e6:.0f} M | "
              f"{row['floor_per_token'] / 1e6:.0f} M | {row['graph_calls_per_token']:.0f} | {row['load']} |")


if __name__ == "__main__":
    main()
