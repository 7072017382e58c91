"""Hostile clients against a live `qnnrt serve` (issue 47), the figures of docs/RELIABILITY.md:

    qnnrt serve MODEL.pte --tokenizer DIR --model-name stories --port 8047 &   # QNNRT_DEBUG_WORKER=1: its pid
    python bench/serve_hostile.py slow 8047 --sockets 200 --mode partial      # or idle
    python bench/serve_hostile.py big 8047 --requests 20 --pid WORKER_PID     # 4 MiB prompts, RSS, /health

`slow`: that many sockets open (sending nothing, or half a header), then /health and a one-token
completion timed. `big`: 4 MiB prompts (chat, completion, token ids, 110,000 short messages) sent
`--requests` times each while /health is polled: each kind's status, seconds and the worker's RSS
after requests 1, 2, n/4, n/2, 3n/4 and n; the slowest /health."""
from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from typing import Any

import httpx

BIG = "cat " * ((1 << 20) - 100)
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": BIG}]}),
    "completion": ("/v1/completions", {"prompt": BIG}),
    "ids": ("/v1/completions", {"prompt": [5] * 1_300_000}),
    "many": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}] * 110_000}),
}


def _rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    with open(f"/proc/{pid}/status") as f:
        return round(next(int(x.split()[1]) for x in f if x.startswith("VmRSS")) / 1024, 1)


def slow(a: argparse.Namespace) -> dict:
    socks = []
    for _ in range(a.sockets):
        s = socket.create_connection(("127.0.0.1", a.port))
        if a.mode == "partial":
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    time.sleep(1)
    base = f"http://127.0.0.1:{a.port}"
    t = time.monotonic()
    h = httpx.get(base + "/health", timeout=60)
    health = (h.status_code, round(time.monotonic() - t, 3))
    t = time.monotonic()
    c = httpx.post(base + "/v1/completions", timeout=60, headers=a.headers,
                   json={"model": a.model, "prompt": "Once", "max_tokens": 1, "temperature": 0})
    out = {"sockets": a.sockets, "mode": a.mode, "health": health,
           "completion": (c.status_code, round(time.monotonic() - t, 3))}
    for s in socks:
        s.close()
    return out


def big(a: argparse.Namespace) -> dict:
    base = f"http://127.0.0.1:{a.port}"
    worst, stop = [0.0], threading.Event()

    def poll() -> None:
        while not stop.is_set():
            t = time.monotonic()
            httpx.get(base + "/health", timeout=60)
            worst[0] = max(worst[0], time.monotonic() - t)
            time.sleep(0.05)
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    out: dict = {"rss_before": _rss_mb(a.pid)}
    n = a.requests
    for name, (path, body) in KINDS.items():
        data = json.dumps({"model": a.model, "max_tokens": 1} | body).encode()
        rows = []
        for _ in range(n):
            t = time.monotonic()
            r = httpx.post(base + path, content=data, timeout=120,
                           headers={"Content-Type": "application/json"} | a.headers)
            rows.append((r.status_code, round(time.monotonic() - t, 2), _rss_mb(a.pid)))
        out[name] = {"bytes": len(data), "at": [rows[i] for i in sorted({0, 1, n // 4, n // 2, 3 * n // 4, n - 1})]}
    stop.set()
    th.join()
    out["worst_health_s"] = round(worst[0], 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["slow", "big"])
    p.add_argument("port", type=int)
    p.add_argument("--model", default="stories")
    p.add_argument("--api-key", default=None)
    p.add_argument("--sockets", type=int, default=200)
    p.add_argument("--mode", choices=["idle", "partial"], default="partial")
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--pid", type=int, default=None, help="the serving worker's pid (its RSS)")
    a = p.parse_args()
    a.headers = {"Authorization": f"Bearer {a.api_key}"} if a.api_key else {}
    print(json.dumps(slow(a) if a.what == "slow" else big(a), indent=1))


if __name__ == "__main__":
    main()
