"""`qnnrt llm` on the ExecuTorch LLM fixture: time to first token, prefill and decode tokens/s,
decode per-token latency; ExecuTorch's own per-call figures from the fixture's meta.json.

    python bench/bench_llm.py [--runs 3] [--max-new-tokens 32]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

FIX = Path(__file__).resolve().parents[1] / "tests" / "data" / "llm" / "llama_stories_fp16"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    args = ap.parse_args()
    meta = json.loads((FIX / "meta.json").read_text())
    prompt = ",".join(map(str, meta["prompt"]))
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.runs):
            rep = Path(d) / f"r{i}.json"
            cmd = [sys.executable, "-m", "qnnrt", "llm", str(FIX / "model.pte"), "--prompt-tokens", prompt,
                   "--max-new-tokens", str(args.max_new_tokens), "--ignore-eos", "--report", str(rep)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            rows.append(json.loads(rep.read_text()))
    med = statistics.median
    r = {"runs": args.runs, "prompt_tokens": len(meta["prompt"]), "new_tokens": args.max_new_tokens,
         "ttft_ms": med(x["ttft_s"] * 1e3 for x in rows),
         "prefill_tokens_per_s": med(x["prefill_tokens_per_s"] for x in rows),
         "decode_tokens_per_s": med(x["decode_tokens_per_s"] for x in rows),
         "decode_ms_median": med(x["decode_ms"]["median"] for x in rows),
         "decode_ms_p90": med(x["decode_ms"]["p90"] for x in rows),
         "greedy_prefix_ok": all(x["generated_tokens"][:len(meta["greedy_tokens"])] == meta["greedy_tokens"]
                                 for x in rows)}
    et = meta.get("executorch_run", {})
    r["executorch_prefill_ms"] = et.get("prefill_ms")
    r["executorch_decode_ms_median"] = et.get("decode_ms_median")
    print(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
