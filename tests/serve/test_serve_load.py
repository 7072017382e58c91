"""Concurrency and load on a live `qnnrt serve` (the LLM fixture and the tiny embedding model):
16 clients at once, streamed and not, mixed with embeddings, each answered exactly as when alone or
told 429 with Retry-After (then answered when it retries); clients that leave the queue free their
places at once; ~200 short requests keep the serving process's RSS, fds and threads flat (the
2,000-request soak: bench/serve_soak.py, docs/RELIABILITY.md)."""
from __future__ import annotations

import json
import socket
import sys
import threading
import time
from typing import Any

import pytest

from tests.helpers.llm_text import text_folder  # noqa: F401
from tests.serve import soak
from tests.serve.conftest import API_KEY, MODEL_ID, start_server
from tests.serve.test_serve import AUTH, RUNNING, TIMEOUT, _first_token, _stream, assert_openai_error, metrics, \
    wait_idle

httpx = pytest.importorskip("httpx", reason="needs httpx (pip install -e '.[test]')")

pytestmark = pytest.mark.slow
EMB_ID = "tiny-embedder"
MAX_QUEUE = 8
CLIENTS = 16


@pytest.fixture(scope="module")
def server(embedding_program, text_folder, tmp_path_factory):  # noqa: F811
    s = start_server(text_folder, tmp_path_factory.mktemp("serve") / "report.json", "--api-key", API_KEY,
                     "--max-queue", str(MAX_QUEUE), "--embeddings", str(embedding_program),
                     "--embeddings-tokenizer", str(text_folder), "--embeddings-name", EMB_ID)
    yield s
    if s.proc.poll() is None:
        s.stop()


def request_of(i: int) -> tuple[str, dict[str, Any]]:
    """Client i's request: greedy, so its answer is the same alone or in a crowd."""
    kind = i % 4
    if kind == 0:
        return "/v1/chat/completions", {"model": MODEL_ID, "messages": [{"role": "user", "content": f"Tell {i}"}],
                                        "max_tokens": 2, "temperature": 0, "stream": True}
    if kind == 1:
        return "/v1/completions", {"model": MODEL_ID, "prompt": f"The dog {i}", "max_tokens": 2, "temperature": 0}
    if kind == 2:
        return "/v1/embeddings", {"model": EMB_ID, "input": [f"text {i}", "a cat"]}
    return "/v1/completions", {"model": MODEL_ID, "prompt": [1, 5 + i], "max_tokens": 2, "temperature": 0,
                               "stream": True}


def answer(r: httpx.Response) -> Any:
    """What a response says (the text of each choice, or the vectors), streamed or not."""
    assert r.status_code == 200, r.text
    if r.headers["content-type"].startswith("text/event-stream"):
        events = [json.loads(x.removeprefix("data: ")) for x in r.text.splitlines()
                  if x.startswith("data: {")]
        assert r.text.rstrip().endswith("data: [DONE]") and not any("error" in e for e in events)
        return "".join(c.get("text") or c.get("delta", {}).get("content") or "" for e in events for c in e["choices"])
    body = r.json()
    if body["object"] == "list":
        return [d["embedding"] for d in body["data"]]
    return [c.get("text", c.get("message", {}).get("content")) for c in body["choices"]]


def test_sixteen_concurrent_clients_are_answered_as_alone_or_told_to_retry(server):
    alone = [answer(httpx.post(server.base + p, json=b, headers=AUTH, timeout=TIMEOUT))
             for p, b in map(request_of, range(CLIENTS))]
    results: dict[int, list[httpx.Response]] = {i: [] for i in range(CLIENTS)}
    start = threading.Barrier(CLIENTS)

    def client(i: int) -> None:
        path, body = request_of(i)
        start.wait()
        with httpx.Client(timeout=TIMEOUT) as c:
            while True:
                r = c.post(server.base + path, json=body, headers=AUTH)
                results[i].append(r)
                if r.status_code != 429:
                    return
                time.sleep(int(r.headers["retry-after"]))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    told = 0
    for i in range(CLIENTS):
        *refused, last = results[i]
        for r in refused:
            e = assert_openai_error(r, 429)
            assert e["code"] == "rate_limit_exceeded" and int(r.headers["Retry-After"]) >= 1
        told += len(refused)
        assert answer(last) == alone[i], i
    assert told >= 1                       # 16 at once against a queue of 8: some were told to retry
    wait_idle(server)


def _wait_queue(server, depth: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while httpx.get(server.base + "/health", timeout=30).json()["queue_depth"] != depth:
        assert time.monotonic() < deadline, f"the queue never held {depth}"
        time.sleep(0.02)


def test_clients_that_leave_the_queue_free_their_places(server):
    wait_idle(server)
    c1, running = _stream(server, RUNNING)
    keep = _first_token(running)
    socks = []
    try:
        data = json.dumps({"model": MODEL_ID, "prompt": "x", "max_tokens": 1}).encode()
        for _ in range(MAX_QUEUE):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['Authorization']}\r\n"
                       f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data)
            socks.append(s)
        _wait_queue(server, MAX_QUEUE)
        assert httpx.post(server.base + "/v1/completions", json={"model": MODEL_ID, "prompt": "y"},
                          headers=AUTH, timeout=30).status_code == 429        # full
        for s in socks:
            s.close()
        _wait_queue(server, 0)                 # while the long request still runs
        assert httpx.get(server.base + "/health", timeout=30).json()["busy"]
        queued: dict[str, tuple[Any, Any]] = {}    # its headers come when it starts
        waiter = threading.Thread(target=lambda: queued.update(w=_stream(server, {"model": MODEL_ID, "prompt": "z",
                                                                                  "max_tokens": 1})))
        waiter.start()
        _wait_queue(server, 1)                 # accepted: the places are free
    finally:
        del keep
        running.close()
        c1.close()
    waiter.join(TIMEOUT)
    c2, waiting = queued["w"]
    assert waiting.status_code == 200
    waiting.close()
    c2.close()
    wait_idle(server)
    assert metrics(server)["qnnrt_generated_tokens_total"] >= 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_two_hundred_short_requests_keep_rss_fds_and_threads_flat(server):
    wait_idle(server)
    pid = server.worker_pid()
    assert pid is not None
    samples = soak.soak(server.base, AUTH, pid, requests=210, every=30, model=MODEL_ID, embeddings=EMB_ID)
    print("\n" + soak.table(samples))
    warm, last = samples[2], samples[-1]              # after 60 requests: caches, grammars, allocator warm
    assert last.rss_mb - warm.rss_mb < 8, soak.table(samples)
    assert last.fds <= warm.fds and last.threads <= warm.threads, soak.table(samples)
    assert httpx.get(server.base + "/health", timeout=30).json()["status"] == "ok"
    assert "Traceback" not in server.stderr()
