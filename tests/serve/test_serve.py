"""`qnnrt serve` on the LLM fixture, driven by the official `openai` client and by raw HTTP: one live
server for the module (the last test stops it with SIGTERM). Prompts and max_tokens stay small: the
model runs on the HTP simulator."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers.cli_helpers import ROOT
from tests.serve.conftest import API_KEY, FIX, MODEL_ID

openai = pytest.importorskip("openai", reason="needs the openai client (pip install -e '.[test]')")
httpx = pytest.importorskip("httpx", reason="needs httpx (pip install -e '.[test]')")

AUTH = {"Authorization": f"Bearer {API_KEY}"}
TIMEOUT = 300
LONG = 120        # max_tokens of a request meant to be still running when the test acts (of 128 positions)
# such a request: greedy, so it is the same on every machine (this prompt meets no end of sequence
# within LONG tokens: test_the_long_request_runs_to_its_length), never ended early by a sampled EOS
RUNNING = {"model": MODEL_ID, "prompt": "Once", "max_tokens": LONG, "temperature": 0, "seed": 1}

# each module starts a live `qnnrt serve` with the LLM fixture loaded: not for the inner loop
pytestmark = pytest.mark.slow


def client(server, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base + "/v1", api_key=kw.pop("api_key", API_KEY), max_retries=0,
                         timeout=TIMEOUT, **kw)


def post(server, path: str, body, **kw) -> httpx.Response:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(server.base + path, content=data, headers=kw.pop("headers", AUTH), timeout=TIMEOUT, **kw)


def metrics(server) -> dict[str, float]:
    r = httpx.get(server.base + "/metrics", headers=AUTH, timeout=30)
    assert r.status_code == 200
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in r.text.splitlines())}


def wait_idle(server, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        h = httpx.get(server.base + "/health", timeout=30).json()
        if not h["busy"] and h["queue_depth"] == 0:
            return
        time.sleep(0.1)
    raise AssertionError("the server stayed busy")


def wait_busy(server, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not httpx.get(server.base + "/health", timeout=30).json()["busy"]:
        assert time.monotonic() < deadline, "the request never started"
        time.sleep(0.02)


def assert_openai_error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert isinstance(e["message"], str) and e["message"] and isinstance(e["type"], str)
    assert "param" in e and "code" in e and "Traceback" not in r.text
    return e


@pytest.fixture(scope="module")
def greedy(server):
    """One greedy completion with logprobs (the stop-sequence and `qnnrt llm` tests read it)."""
    return client(server).completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=4,
                                             temperature=0, logprobs=0)


# ------------------------------------------------------------------------------------------------
def test_models_health_and_metrics(server):
    models = client(server).models.list()
    assert [m.id for m in models.data] == [MODEL_ID] and models.data[0].owned_by == "qnnrt"
    assert client(server).models.retrieve(MODEL_ID).id == MODEL_ID
    r = httpx.get(server.base + "/health", timeout=30)          # public: no key needed
    assert r.status_code == 200 and r.json()["status"] == "ok"
    m = metrics(server)
    assert {"qnnrt_queue_depth", "qnnrt_busy", "qnnrt_pd_in_use_bytes", 'qnnrt_requests_total{status="completed"}',
            "qnnrt_time_to_first_token_seconds_sum", "qnnrt_decode_tokens_per_second"} <= set(m)
    assert m["qnnrt_pd_in_use_bytes"] >= 0         # contexts are created at the first request


def test_chat_streamed_equals_not_streamed_for_the_same_seed(server):
    c = client(server)
    msgs = [{"role": "user", "content": "Tell me a story"}]
    whole = c.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=4, temperature=0.9, seed=7)
    chunks = list(c.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=4, temperature=0.9, seed=7,
                                            stream=True, stream_options={"include_usage": True}))
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert streamed == whole.choices[0].message.content
    assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 4
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].usage.completion_tokens == 4 and chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


@pytest.mark.slow
def test_greedy_completion_equals_qnnrt_llm(server, greedy, text_folder, tmp_path):
    rep = tmp_path / "llm.json"
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", "llm", str(FIX / "model.pte"), "--prompt",
                        "Once upon a time", "--tokenizer", str(text_folder), "--max-new-tokens", "4", "--report",
                        str(rep)], capture_output=True, text=True, timeout=TIMEOUT,
                       env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert r.returncode == 0, r.stderr
    llm = json.loads(rep.read_text())
    from qnnrt.llm.text import TextTokenizer
    tok = TextTokenizer.from_path(text_folder)
    ids = llm["generated_tokens"]
    assert greedy.choices[0].text == llm["text"] == tok.decode(ids)
    assert greedy.choices[0].logprobs.tokens == tok.token_texts(ids)     # the same ids, one by one
    assert greedy.usage.prompt_tokens == llm["prompt_tokens"] == len(llm["prompt_token_ids"])


def test_stop_sequence_cuts_the_text(server, greedy):
    text = greedy.choices[0].text
    at = next((i for i in range(1, len(text)) if text[i] not in "\ufffd"), None)
    if at is None:
        pytest.skip(f"the greedy text {text!r} has no usable stop string")
    stop = text[at:at + 2]
    r = client(server).completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=4, temperature=0,
                                          stop=[stop, "never-seen"])
    assert r.choices[0].text == text[:text.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_prompt_longer_than_the_context_is_a_400_with_the_counts(server):
    r = post(server, "/v1/completions", {"model": MODEL_ID, "prompt": [5] * 97, "max_tokens": 1})
    e = assert_openai_error(r, 400)
    assert e["code"] == "context_length_exceeded" and "97 tokens" in e["message"] and "at most 96" in e["message"]
    with pytest.raises(openai.BadRequestError, match="at most 96"):
        client(server).chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "cat " * 120}])


def test_next_chat_turn_reuses_the_kv_cache(server):
    c = client(server)
    turn1 = [{"role": "user", "content": "Once upon a time"}]
    a = c.chat.completions.create(model=MODEL_ID, messages=turn1, max_tokens=3, temperature=0, logprobs=True,
                                  top_logprobs=2)
    lps = a.choices[0].logprobs.content
    assert len(lps) == a.usage.completion_tokens == 3
    for e in lps:                                       # greedy: the chosen token is the best one
        assert len(e.top_logprobs) == 2 and e.logprob <= 0 and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
        assert e.logprob == pytest.approx(e.top_logprobs[0].logprob) and e.bytes == list(e.token.encode())
    turn2 = turn1 + [{"role": "assistant", "content": a.choices[0].message.content},
                     {"role": "user", "content": "And then?"}]
    b = c.chat.completions.create(model=MODEL_ID, messages=turn2, max_tokens=2, temperature=0)
    cached = b.usage.prompt_tokens_details.cached_tokens
    assert cached >= a.usage.prompt_tokens                  # all of turn 1's prompt came from the cache
    assert cached < b.usage.prompt_tokens
    other = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "system", "content": "x"}], max_tokens=1,
                                      temperature=0)
    assert other.usage.prompt_tokens_details.cached_tokens <= 1     # BOS at most: another conversation


def test_two_concurrent_clients_are_answered_in_order_as_if_serial(server):
    c = client(server)
    prompts = ["The dog ran", "She said hello"]
    serial = [c.completions.create(model=MODEL_ID, prompt=p, max_tokens=2, temperature=0).choices[0].text
              for p in prompts]
    results: dict[int, tuple[str, float]] = {}

    def ask(i: int) -> None:
        r = c.completions.create(model=MODEL_ID, prompt=prompts[i], max_tokens=2, temperature=0)
        results[i] = (r.choices[0].text, time.monotonic())

    first = threading.Thread(target=ask, args=(0,))
    first.start()
    wait_busy(server)
    second = threading.Thread(target=ask, args=(1,))
    second.start()
    first.join(TIMEOUT)
    second.join(TIMEOUT)
    assert [results[0][0], results[1][0]] == serial
    assert results[0][1] < results[1][1]                # FIFO: the first one in is the first one out


def _stream(server, body: dict) -> tuple[httpx.Client, httpx.Response]:
    cl = httpx.Client(timeout=TIMEOUT)
    req = cl.build_request("POST", server.base + "/v1/completions", json=body | {"stream": True}, headers=AUTH)
    return cl, cl.send(req, stream=True)


def _first_token(resp: httpx.Response):
    """Read up to the first event; returns the line iterator, to be kept (dropping it closes the
    connection, which the server sees as a client gone)."""
    lines = resp.iter_lines()
    for line in lines:
        if line.startswith("data: {"):
            assert '"error"' not in line, line
            return lines
    raise AssertionError("the stream ended before a token")


def _post_and_hang_up(server, body: dict) -> None:
    """POST `body` (not streamed) over a raw socket and close it once the server is generating:
    a client that gives up waiting, whatever the machine's speed."""
    import socket
    data = json.dumps(body).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            f"Authorization: {AUTH['Authorization']}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head + data)
        wait_busy(server)


def test_a_client_that_disconnects_stops_its_generation(server):
    before = metrics(server)
    cl, resp = _stream(server, RUNNING)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    _first_token(resp)
    resp.close()
    cl.close()
    wait_idle(server)
    _post_and_hang_up(server, RUNNING)   # not streamed: the client gives up
    nxt = client(server).completions.create(model=MODEL_ID, prompt="The", max_tokens=1, temperature=0)
    assert nxt.choices[0].finish_reason == "length"
    after = metrics(server)
    assert after['qnnrt_requests_total{status="cancelled"}'] == before['qnnrt_requests_total{status="cancelled"}'] + 2
    assert after["qnnrt_generated_tokens_total"] - before["qnnrt_generated_tokens_total"] < 2 * LONG
    assert after["qnnrt_pd_in_use_bytes"] > 0


def test_the_long_request_runs_to_its_length(server):
    """What the tests that act on a running request rely on."""
    wait_idle(server)
    r = client(server).completions.create(**RUNNING)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == LONG


def test_a_full_queue_answers_429_at_once(server):
    wait_idle(server)
    c1, running = _stream(server, RUNNING)
    keep = _first_token(running)                                 # running
    # waits (--max-queue 1); its headers come when it starts (a queued stream may still get a 503)
    queued: dict[str, tuple[httpx.Client, httpx.Response]] = {}
    waiter = threading.Thread(target=lambda: queued.update(w=_stream(server, {"model": MODEL_ID, "prompt": "The",
                                                                              "max_tokens": 1})))
    waiter.start()
    try:
        deadline = time.monotonic() + 60
        while httpx.get(server.base + "/health", timeout=30).json()["queue_depth"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        r = post(server, "/v1/completions", {"model": MODEL_ID, "prompt": "Hi", "max_tokens": 1})
        e = assert_openai_error(r, 429)
        assert e["code"] == "rate_limit_exceeded" and "--max-queue 1" in e["message"]
        with pytest.raises(openai.RateLimitError):
            client(server).chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "x"}])
    finally:
        del keep
        running.close()
        c1.close()
        waiter.join(TIMEOUT)
        c2, waiting = queued["w"]
        waiting.close()
        c2.close()
    wait_idle(server)
    assert metrics(server)['qnnrt_requests_total{status="rejected_queue_full"}'] >= 2


def test_a_wrong_or_missing_api_key_is_401(server):
    with pytest.raises(openai.AuthenticationError):
        client(server, api_key="sk-wrong").models.list()
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": API_KEY}):
        r = post(server, "/v1/chat/completions", {"model": MODEL_ID, "messages": []}, headers=headers)
        assert assert_openai_error(r, 401)["code"] == "invalid_api_key"
    assert httpx.get(server.base + "/metrics", timeout=30).status_code == 401


CHAT = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
MALFORMED = [  # (name, path, body, status)
    ("not json", "/v1/chat/completions", b"{not json", 400),
    ("json array", "/v1/chat/completions", b"[1, 2]", 400),
    ("empty body", "/v1/chat/completions", b"", 400),
    ("invalid utf-8", "/v1/chat/completions", b'{"model": "\xff\xfe"}', 400),
    ("deep nesting", "/v1/chat/completions", b"[" * 100000 + b"]" * 100000, 400),
    ("no model", "/v1/chat/completions", {"messages": CHAT["messages"]}, 400),
    ("unknown model", "/v1/chat/completions", CHAT | {"model": "../../etc/passwd"}, 404),
    ("model a lone surrogate", "/v1/chat/completions", json.dumps(CHAT).replace(MODEL_ID, "\\ud800").encode(), 400),
    ("no messages", "/v1/chat/completions", {"model": MODEL_ID}, 400),
    ("empty messages", "/v1/chat/completions", CHAT | {"messages": []}, 400),
    ("messages a string", "/v1/chat/completions", CHAT | {"messages": "hi"}, 400),
    ("message not an object", "/v1/chat/completions", CHAT | {"messages": ["hi"]}, 400),
    ("bad role", "/v1/chat/completions", CHAT | {"messages": [{"role": "wizard", "content": "x"}]}, 400),
    ("content a number", "/v1/chat/completions", CHAT | {"messages": [{"role": "user", "content": 5}]}, 400),
    ("image part", "/v1/chat/completions", CHAT | {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]}, 400),
    ("temperature a string", "/v1/chat/completions", CHAT | {"temperature": "hot"}, 400),
    ("temperature too high", "/v1/chat/completions", CHAT | {"temperature": 5}, 400),
    ("temperature NaN", "/v1/chat/completions", json.dumps(CHAT)[:-1] + ', "temperature": NaN}', 400),
    ("top_p zero", "/v1/chat/completions", CHAT | {"top_p": 0}, 400),
    ("max_tokens zero", "/v1/chat/completions", CHAT | {"max_tokens": 0}, 400),
    ("max_tokens a string", "/v1/chat/completions", CHAT | {"max_tokens": "10"}, 400),
    ("max_tokens a bool", "/v1/chat/completions", CHAT | {"max_tokens": True}, 400),
    ("seed a float", "/v1/chat/completions", CHAT | {"seed": 1.5}, 400),
    ("n seventeen", "/v1/chat/completions", CHAT | {"n": 17}, 400),
    ("five stops", "/v1/chat/completions", CHAT | {"stop": ["a", "b", "c", "d", "e"]}, 400),
    ("stop a number", "/v1/chat/completions", CHAT | {"stop": 7}, 400),
    ("top_logprobs without logprobs", "/v1/chat/completions", CHAT | {"top_logprobs": 2}, 400),
    ("top_logprobs 21", "/v1/chat/completions", CHAT | {"logprobs": True, "top_logprobs": 21}, 400),
    ("stream a string", "/v1/chat/completions", CHAT | {"stream": "yes"}, 400),
    ("stream_options without stream", "/v1/chat/completions", CHAT | {"stream_options": {"include_usage": True}},
     400),
    ("tool without a name", "/v1/chat/completions", CHAT | {"tools": [{"type": "function", "function": {}}]}, 400),
    ("tool_choice of no tool", "/v1/chat/completions", CHAT | {"tools": [{"type": "function", "function": {
        "name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}, 400),
    ("penalty too high", "/v1/chat/completions", CHAT | {"presence_penalty": 3.0}, 400),
    ("logit_bias not a token", "/v1/chat/completions", CHAT | {"logit_bias": {"x": 100}}, 400),
    ("logit_bias too big", "/v1/chat/completions", CHAT | {"logit_bias": {"5": 200}}, 400),
    ("min_p above 1", "/v1/chat/completions", CHAT | {"min_p": 2}, 400),
    ("response format unknown", "/v1/chat/completions", CHAT | {"response_format": {"type": "yaml"}}, 400),
    ("schema not compilable", "/v1/chat/completions", CHAT | {"response_format": {"type": "json_schema",
                                                               "json_schema": {"name": "x", "schema": {"type": "no"}}}},
     400),
    ("completion without prompt", "/v1/completions", {"model": MODEL_ID}, 400),
    ("completion token out of vocab", "/v1/completions", {"model": MODEL_ID, "prompt": [1, 100000]}, 400),
    ("completion batch", "/v1/completions", {"model": MODEL_ID, "prompt": ["a", "b"]}, 400),
    ("completion echo", "/v1/completions", {"model": MODEL_ID, "prompt": "a", "echo": True}, 400),
    ("completion with tools", "/v1/completions", {"model": MODEL_ID, "prompt": "a", "tools": []}, 400),
    ("completion logprobs 6", "/v1/completions", {"model": MODEL_ID, "prompt": "a", "logprobs": 6}, 400),
    ("lone surrogate", "/v1/completions", b'{"model": "%s", "prompt": "a\\ud800"}' % MODEL_ID.encode(), 400),
    ("lone surrogate in chat", "/v1/chat/completions",
     json.dumps(CHAT).replace('"hi"', '"\\udfff"').encode(), 400),
    ("unknown path", "/v1/embeddings", CHAT, 404),
    # issue 35: each was a 500 with a traceback
    ("logit_bias key a superscript digit", "/v1/chat/completions", CHAT | {"logit_bias": {"²": 1}}, 400),
    ("temperature of 400 digits", "/v1/chat/completions", json.dumps(CHAT)[:-1] + ', "temperature": ' + "1" * 400
     + "}", 400),
    ("top_p of 400 digits", "/v1/completions", '{"model": "%s", "prompt": "a", "top_p": %s}' % (MODEL_ID, "9" * 400),
     400),
    ("tool arguments 100000 deep", "/v1/chat/completions", CHAT | {"messages": [
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
            "name": "f", "arguments": "[" * 100000}}]}]}, 400),
    ("unknown field", "/v1/chat/completions", CHAT | {"mirostat": 2}, 400),
    ("n huge", "/v1/chat/completions", CHAT | {"n": 10 ** 12}, 400),
    ("max_tokens beyond int64", "/v1/completions", {"model": MODEL_ID, "prompt": "a", "max_tokens": 1 << 64}, 400),
    ("response_format schema 100 deep", "/v1/chat/completions", CHAT | {"response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": json.loads('{"not": ' * 100 + "{}" + "}" * 100)}
    }}, 400),
]


@pytest.mark.slow
def test_malformed_requests_get_a_4xx_each_and_the_server_lives(server):
    seen = []
    for name, path, body, status in MALFORMED:
        r = post(server, path, body)
        seen.append((name, r.status_code))
        assert_openai_error(r, status)
    assert len(seen) >= 30
    r = httpx.get(server.base + "/v1/chat/completions", headers=AUTH, timeout=30)       # wrong method
    assert_openai_error(r, 405)
    for kind in ("text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1",
                 "multipart/form-data; boundary=x"):
        r = post(server, "/v1/chat/completions", CHAT, headers=AUTH | {"Content-Type": kind})
        assert assert_openai_error(r, 415)["code"] == "unsupported_media_type"
    assert post(server, "/v1/completions", {"model": MODEL_ID, "prompt": "a", "max_tokens": 1},
                headers=AUTH | {"Content-Type": "application/json; charset=UTF-8"}).status_code == 200
    big = b'{"model": "' + b"x" * (5 << 20) + b'"}'
    assert assert_openai_error(post(server, "/v1/completions", big), 413)["code"] == "request_too_large"
    chunked = httpx.post(server.base + "/v1/completions", content=iter([b" " * (1 << 20)] * 5), headers=AUTH,
                         timeout=TIMEOUT)                                                # no Content-Length
    assert_openai_error(chunked, 413)
    assert httpx.get(server.base + "/health", timeout=30).status_code == 200
    assert client(server).models.list().data[0].id == MODEL_ID
    assert server.proc.poll() is None and "Traceback" not in server.stderr()


@pytest.mark.parametrize("missing", ["uvicorn", "msgspec"])
def test_serve_without_the_asgi_stack_says_what_to_install(monkeypatch, missing):
    from qnnrt.cli import serve
    from qnnrt.errors import QnnrtError
    monkeypatch.setitem(sys.modules, missing, None)
    with pytest.raises(QnnrtError, match=f"{missing} is missing") as e:
        serve.require_stack()
    assert serve.SERVE_HINT in str(e.value) and "[serve]" in serve.SERVE_HINT


# the last test: it stops the module's server
@pytest.mark.slow
def test_sigterm_with_a_request_in_flight(server):
    wait_idle(server)
    cl, resp = _stream(server, RUNNING)
    lines = _first_token(resp)
    worker = server.worker_pid()
    server.proc.send_signal(signal.SIGTERM)
    rest = list(lines)
    cl.close()
    assert server.proc.wait(TIMEOUT) == 128 + signal.SIGTERM
    assert any("shutting down" in line for line in rest) or not any("[DONE]" in line for line in rest)
    err = server.stderr()
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    report = json.loads(server.report.read_text())
    last = report["requests"][-1]
    assert last["finish_reason"] == "cancelled" and last["n_generated"] < LONG
    assert {"ttft_s", "decode_ms", "cached_tokens", "prompt_tokens", "prefilled_tokens"} <= set(last)
    assert report["totals"]["completed"] >= 5 and report["residency"]["creates"] >= 1
    assert worker is not None
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)                                          # no worker left behind
