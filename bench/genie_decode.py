"""Decode per token on the simulator: qnnrt against Genie's own runtime (libGenie.so from the
onnxruntime-qnn wheel, through tools/genie_reference.py) on the same Genie bundle and prompt, in
alternating rounds of one process each (one sitting: the machine's load moves both alike).

    python bench/genie_decode.py BUNDLE --prompt-tokens 0,85,73,70,379,366 [--max-new-tokens 24]
        [--rounds 3]

`--prompt-tokens` is the whole sequence the model sees (BOS first): qnnrt takes it as it is, Genie
without the config's bos-token, which it prepends itself to a dialog's first query.

Per round: Genie generates (its config's sampler; greedy for a top-k 1 bundle) and reports the time
between successive tokens; then `qnnrt llm BUNDLE` generates the same count with the same sampler
(its report's decode ms per token). Prints one JSON object: each round's medians, the medians over
rounds, each side's tokens and whether they are equal.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def genie_round(bundle: str, ids: str, n: int) -> dict:
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "genie_reference.py"), bundle,
                        "--prompt-tokens", ids, "--max-new-tokens", str(n), "--json"],
                       capture_output=True, text=True, env=_env(), check=False)
    if r.returncode != 0:
        sys.exit(f"Genie failed: {r.stderr[-2000:]}")
    d = json.loads(r.stdout)
    return {"tokens": d["tokens"], "decode_ms_median": d["decode_ms_median"],
            "first_token_ms": d["first_token_s"] * 1e3}


def qnnrt_round(bundle: str, ids: str, n: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        r = subprocess.run([sys.executable, "-m", "qnnrt.cli", "llm", bundle, "--prompt-tokens", ids,
                            "--max-new-tokens", str(n), "--report", str(report), "--quiet"],
                           capture_output=True, text=True, env=_env(), check=False)
        if r.returncode != 0:
            sys.exit(f"qnnrt failed: {r.stderr[-2000:]}")
        d = json.loads(report.read_text())
    return {"tokens": d["generated_tokens"], "decode_ms_median": d["decode_ms"]["median"],
            "first_token_ms": d["ttft_s"] * 1e3}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bundle")
    ap.add_argument("--prompt-tokens", required=True)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    ids = [int(t) for t in args.prompt_tokens.split(",")]
    bos = json.loads((Path(args.bundle) / "genie_config.json").read_text())["dialog"]["context"].get("bos-token")
    genie_ids = ",".join(map(str, ids[1:] if ids and ids[0] == bos else ids))
    rounds = []
    for _ in range(args.rounds):
        rounds.append({"genie": genie_round(args.bundle, genie_ids, args.max_new_tokens),
                       "qnnrt": qnnrt_round(args.bundle, args.prompt_tokens, args.max_new_tokens)})
    med = {side: {k: statistics.median(r[side][k] for r in rounds)
                  for k in ("decode_ms_median", "first_token_ms")} for side in ("genie", "qnnrt")}
    g, q = rounds[0]["genie"]["tokens"], rounds[0]["qnnrt"]["tokens"]
    print(json.dumps({"bundle": args.bundle, "prompt_tokens": args.prompt_tokens, "rounds": rounds,
                      "median": med, "tokens_equal": g == q,
                      "first_difference": next((i for i, (a, b) in enumerate(zip(g, q)) if a != b), None)},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
