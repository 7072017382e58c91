"""`qnnrt serve` against `qnnrt llm` on the LLM fixture (run by hand; numbers go to bench/RESULTS.md).

1. Server overhead per streamed token: the client-observed interval between token events (completions,
   stream, logprobs=0 so every token is one event) minus the engine's own decode time per token for the
   same request (from `--report`); and `qnnrt llm`'s decode per token on the same prompt.
2. TTFT of a chat's second turn with the KV cache reused (only the new tokens prefilled) and with
   `--no-kv-reuse`, measured by the client (request sent -> first content event).

    nice -n 10 python bench/bench_serve.py [--tokens 24] [--turns 5]
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

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.helpers.llm_text import write_tokenizer_folder  # noqa: E402
from tests.serve.conftest import FIX, MODEL_ID, start_server  # noqa: E402

PROMPT = "Once upon a time there was a little cat"
ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def llm_decode_ms(tok: Path, n: int, tmp: Path) -> dict:
    rep = tmp / "llm.json"
    subprocess.run([sys.executable, "-m", "qnnrt.cli", "llm", str(FIX / "model.pte"), "--prompt", PROMPT,
                    "--tokenizer", str(tok), "--max-new-tokens", str(n), "--ignore-eos", "--report", str(rep),
                    "--quiet"], check=True, env=ENV, capture_output=True)
    r = json.loads(rep.read_text())
    return {"ttft_ms": r["ttft_s"] * 1e3, "decode_ms_median": r["decode_ms"]["median"], "n": r["n_generated"]}


def stream_times(base: str, body: dict) -> tuple[float, list[float]]:
    """(seconds to the first token event, arrival times of token events)."""
    t0 = time.perf_counter()
    arrivals = []
    with httpx.stream("POST", base + body.pop("_path"), json=body | {"stream": True}, timeout=600) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and '"finish_reason": null' in line and '"role"' not in line:
                arrivals.append(time.perf_counter())
    return arrivals[0] - t0, arrivals


def overhead(tok: Path, n: int, tmp: Path) -> dict:
    s = start_server(tok, tmp / "serve.json")
    try:
        base = s.base
        stream_times(base, {"_path": "/v1/completions", "model": MODEL_ID, "prompt": "warm up", "max_tokens": 2})
        _, arr = stream_times(base, {"_path": "/v1/completions", "model": MODEL_ID, "prompt": PROMPT,
                                     "max_tokens": n, "temperature": 0, "logprobs": 0})
    finally:
        s.stop()
    rec = json.loads((tmp / "serve.json").read_text())["requests"][-1]
    client_ms = statistics.median(b - a for a, b in zip(arr, arr[1:])) * 1e3
    return {"client_interval_ms_median": client_ms, "engine_decode_ms_median": rec["decode_ms"]["median"],
            "overhead_ms_per_token": client_ms - rec["decode_ms"]["median"], "tokens": len(arr),
            "n_generated": rec["n_generated"]}


def second_turn_ttft(tok: Path, turns: int, tmp: Path, reuse: bool) -> list[float]:
    s = start_server(tok, tmp / f"turns_{reuse}.json", *([] if reuse else ["--no-kv-reuse"]))
    out = []
    try:
        for i in range(turns):
            first = [{"role": "user", "content": f"Story {i}: " + "the dog ran to the park and " * 3}]
            r = httpx.post(s.base + "/v1/chat/completions", json={"model": MODEL_ID, "messages": first,
                                                                  "max_tokens": 4, "temperature": 0}, timeout=600)
            reply = r.json()["choices"][0]["message"]["content"]
            nxt = first + [{"role": "assistant", "content": reply},
                           {"role": "user", "content": "and then?"}]
            ttft, _ = stream_times(s.base, {"_path": "/v1/chat/completions", "model": MODEL_ID, "messages": nxt,
                                            "max_tokens": 1, "temperature": 0})
            out.append(ttft * 1e3)
    finally:
        s.stop()
    recs = json.loads((tmp / f"turns_{reuse}.json").read_text())["requests"]
    second = recs[1::2]
    print(f"  reuse={reuse}: second-turn prompt {second[0]['prompt_tokens']} tokens, cached "
          f"{[r['cached_tokens'] for r in second]}, prefill calls {[r['prefill_calls'] for r in second]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--turns", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        tok = write_tokenizer_folder(tmp / "tok")
        print(f"load average before: {os.getloadavg()}")
        llm = llm_decode_ms(tok, a.tokens, tmp)
        print(f"qnnrt llm: {llm}")
        ov = overhead(tok, a.tokens, tmp)
        print(f"qnnrt serve: {ov}")
        with_reuse = second_turn_ttft(tok, a.turns, tmp, True)
        without = second_turn_ttft(tok, a.turns, tmp, False)
        print(f"second-turn TTFT ms, KV reuse: median {statistics.median(with_reuse):.1f} {with_reuse}")
        print(f"second-turn TTFT ms, no reuse: median {statistics.median(without):.1f} {without}")
        print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
