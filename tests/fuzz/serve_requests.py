"""Fuzz a running `qnnrt serve` with mutated OpenAI requests (run by hand; not collected by pytest).

Each request starts from a body that would not generate (a prompt longer than the fixture's context),
then 1-3 fields are set to values of the wrong type, range or encoding, or removed. Every answer must
be a 4xx with an OpenAI-shaped error body, or a 200 (a mutation that made a valid short prompt);
never a 5xx. Afterwards check the server's stderr for tracebacks.

    qnnrt serve MODEL.pte --tokenizer DIR --port 0 --model-name model 2> serve.err &
    python tests/fuzz/serve_requests.py PORT [--cases 1500] [--seed 3]; grep -c Traceback serve.err
"""
from __future__ import annotations

import argparse
import collections
import json
import random

import httpx

VALUES = [None, True, False, 0, 1, -1, 2**70, -2**70, 1.5, float("inf"), float("nan"), "", "x", "NaN", "\ud800",
          [], [1], ["a"], [[1]], ["x"] * 5, [1] * 200, 100000, {}, {"a": 1}, {"type": "text"},
          {"include_usage": "yes"}, [{"role": "user"}], [{"role": "user", "content": None}],
          [{"role": "assistant", "content": [{"type": "text"}]}]]
FIELDS = ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
          "stop", "logprobs", "top_logprobs", "stream", "stream_options", "n", "best_of", "echo", "suffix", "tools",
          "response_format", "logit_bias", "presence_penalty", "frequency_penalty", "user", "tool_choice"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--cases", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--model", default="model")
    a = ap.parse_args()
    base = f"http://127.0.0.1:{a.port}"
    rng = random.Random(a.seed)
    stats: collections.Counter[int] = collections.Counter()
    bad = 0
    for _ in range(a.cases):
        path = rng.choice(["/v1/chat/completions", "/v1/completions"])
        body = {"model": a.model, "messages": [{"role": "user", "content": "cat " * 150}], "prompt": [5] * 100,
                "max_tokens": 1}
        if rng.random() < 0.5:
            body.pop("prompt" if path.endswith("chat/completions") else "messages")
        for _ in range(rng.randint(1, 3)):
            field = rng.choice(FIELDS)
            if rng.random() < 0.2:
                body.pop(field, None)
            else:
                body[field] = rng.choice(VALUES)
        data = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
        r = httpx.post(base + path, content=data, timeout=300)
        stats[r.status_code] += 1
        if r.status_code >= 500 or (r.status_code >= 400 and not r.json().get("error", {}).get("message")):
            bad += 1
            print(r.status_code, path, data[:200], r.text[:200])
    print(dict(stats), f"{bad} bad answers")


if __name__ == "__main__":
    main()
