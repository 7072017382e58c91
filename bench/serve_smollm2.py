"""Chat with a converted bundle through `qnnrt serve` and the official `openai` client, as a user
would: the server started by its CLI on the bundle alone (its own tokenizer and chat template), the
question asked greedily (temperature 0), streamed and then not streamed; the answer, time to first
token and decode tokens/s printed. Exits 1 unless every answer contains --expect.

    PYTHONPATH=. nice -n 5 python bench/serve_smollm2.py /tmp/smolbench3/bundle_gguf /tmp/smolbench3/bundle_hf

(bundles made by bench/convert_smollm2.py; `pip install openai` for the client.)
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start(bundle: Path, env: dict, timeout: float) -> tuple[subprocess.Popen, str]:
    """`python -m qnnrt.cli serve BUNDLE --port 0`; (the process, its base URL) once it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "qnnrt.cli", "serve", str(bundle), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or []], daemon=True).start()
    err: list[str] = []
    threading.Thread(target=lambda: err.extend(proc.stderr or []), daemon=True).start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if "listening on http://" in line:
            return proc, line.split("listening on ", 1)[1].strip()
    proc.kill()
    sys.exit(f"qnnrt serve {bundle} did not start in {timeout:.0f} s: {''.join(err)[-2000:]}")


def ask(base: str, question: str, max_tokens: int) -> dict:
    """The question streamed (TTFT, decode rate) and then not streamed (the same answer expected)."""
    from openai import OpenAI
    client = OpenAI(base_url=base, api_key="unused", timeout=1200)
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": question}]
    t0 = time.perf_counter()
    first = last = None
    text, finish, usage = [], None, None
    for chunk in client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=max_tokens,
                                                stream=True, stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                first = first if first is not None else time.perf_counter()
                last = time.perf_counter()
                text.append(c.delta.content)
            finish = c.finish_reason or finish
    n = usage.completion_tokens if usage else 0
    whole = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=max_tokens)
    return {"model": model, "answer": "".join(text), "finish_reason": finish,
            "prompt_tokens": usage.prompt_tokens if usage else None, "completion_tokens": n,
            "ttft_s": round((first or t0) - t0, 2),
            "decode_tokens_per_s": (round((n - 1) / (last - first), 3)
                                    if n > 1 and first and last and last > first else None),
            "answer_not_streamed": whole.choices[0].message.content,
            "finish_reason_not_streamed": whole.choices[0].finish_reason}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundles", type=Path, nargs="+")
    ap.add_argument("--question", default="What is the capital of France?")
    ap.add_argument("--expect", default="Paris")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--start-timeout", type=float, default=600)
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="serve_smollm2_") as tmp:
        # qnnrt's load cache in a temporary folder unless one is given: nothing written to ~/.cache
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               "QNNRT_CACHE_DIR": os.environ.get("QNNRT_CACHE_DIR", tmp)}
        for bundle in args.bundles:
            t0 = time.perf_counter()
            proc, base = start(bundle, env, args.start_timeout)
            try:
                started = time.perf_counter() - t0
                result = {"bundle": str(bundle), "server_start_s": round(started, 1), **ask(base, args.question,
                                                                                           args.max_tokens)}
            finally:
                proc.terminate()
                proc.wait(timeout=60)
            good = args.expect in result["answer"] and args.expect in (result["answer_not_streamed"] or "")
            ok &= good
            print(json.dumps(result | {"ok": good}, indent=1), flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
