"""Property-based fuzzing of a live `qnnrt serve` (the LLM fixture and a tiny embedding model, on
loopback) from its own /openapi.json with schemathesis, bounded in count and time; then requests
written by hand that generators rarely make (hostile bodies, clients that vanish mid-stream); and
every kind of answer checked against the published document. The larger run (>= 2,000 cases):
`python tools/fuzz_serve.py` (docs/RELIABILITY.md)."""
from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from tests.helpers.llm_text import text_folder  # noqa: F401
from tests.serve import api_fuzz
from tests.serve.conftest import API_KEY, MODEL_ID, start_server
from tests.serve.test_serve import AUTH, TIMEOUT, assert_openai_error, client, metrics, post, wait_idle

openai = pytest.importorskip("openai", reason="needs the openai client (pip install -e '.[test]')")
httpx = pytest.importorskip("httpx", reason="needs httpx (pip install -e '.[test]')")
pytest.importorskip("schemathesis", reason="needs schemathesis (pip install -e '.[test]')")
jsonschema = pytest.importorskip("jsonschema", reason="needs jsonschema (pip install -e '.[test]')")

pytestmark = pytest.mark.slow
EMB_ID = "tiny-embedder"
MAX_TOKENS = 1          # the server's --max-tokens: a generated request costs one prefill and a token per choice
DEFAULT_RUN_S = 60      # what the default run is meant to stay under (at a quiet machine's speed)


@pytest.fixture(scope="module")
def server(embedding_program, text_folder, tmp_path_factory):  # noqa: F811
    s = start_server(text_folder, tmp_path_factory.mktemp("serve") / "report.json", "--api-key", API_KEY,
                     "--max-tokens", str(MAX_TOKENS), "--max-queue", "4", "--embeddings", str(embedding_program),
                     "--embeddings-tokenizer", str(text_folder), "--embeddings-name", EMB_ID)
    yield s
    if s.proc.poll() is None:
        s.stop()


def assert_healthy(server) -> None:
    assert httpx.get(server.base + "/health", timeout=30).json()["status"] == "ok"
    assert server.proc.poll() is None
    assert "Traceback" not in server.stderr(), server.stderr()[-3000:]


def test_schemathesis_finds_no_server_error(server, tmp_path):
    """A few hundred generated and mutated requests over every operation (the fuzzing phase, seeded)."""
    r = api_fuzz.run(server.base, API_KEY, tmp_path, phases="fuzzing", max_examples=60, seed=0,
                     timeout_s=10 * DEFAULT_RUN_S)
    print(r.summary())
    assert r.exit_code == 0 and not r.failures and not r.errors, r.output[-6000:]
    assert r.cases >= 150 and r.server_errors == 0, r.summary()
    assert r.statuses.get(200, 0) >= 50 and r.statuses.get(400, 0) >= 50, r.summary()   # both sides reached
    assert_healthy(server)


# -- by hand ---------------------------------------------------------------------------------------
CHAT = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}]}


def test_huge_n_and_max_tokens(server):
    r = post(server, "/v1/chat/completions", CHAT | {"max_tokens": (1 << 63) - 1, "temperature": 0})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == MAX_TOKENS        # cut to the server's
    assert r.json()["choices"][0]["finish_reason"] == "length"
    r = post(server, "/v1/completions", {"model": MODEL_ID, "prompt": "a", "n": 16, "max_tokens": 1 << 40})
    assert r.status_code == 200 and [c["index"] for c in r.json()["choices"]] == list(range(16))
    for body in (CHAT | {"n": 17}, CHAT | {"n": 1 << 70}, CHAT | {"max_tokens": 1 << 63}, CHAT | {"max_tokens": -1}):
        assert_openai_error(post(server, "/v1/chat/completions", body), 400)


def test_a_tiny_temperature_or_repetition_penalty_is_answered(server):
    """The fuzzer's 500: temperature 5e-324 overflowed the sampler's logits / T (tests/llm/test_sampling.py
    has the sampler's side)."""
    for extra in ({"temperature": 5e-324}, {"temperature": 5e-324, "top_p": 0.5},
                  {"temperature": 1.0, "repetition_penalty": 5e-324}):
        for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", {"model": MODEL_ID, "prompt": "a"})):
            r = post(server, path, body | extra | {"max_tokens": 1, "seed": 0})
            assert r.status_code == 200, (path, extra, r.text[:500])
    assert_healthy(server)


def test_hostile_bodies_are_4xx(server):
    cases: list[tuple[bytes, dict[str, str], int]] = [
        (b"{" * 200000, {}, 400),
        (b'{"model": "stories", "messages": [' + b'{"a": ' * 50000 + b"}" * 50000 + b"]}", {}, 400),
        (b'{"model": "stories", "prompt": "\xc3\x28"}', {}, 400),                       # bad UTF-8
        (b'{"model": "stories", "prompt": "a", "temperature": 1e999}', {}, 400),
        (b'{"model": "stories", "prompt": "a", "seed": ' + b"9" * 4500 + b"}", {}, 400),
        (json.dumps(CHAT | {"unknown": {"nested": [1, 2, 3]}}).encode(), {}, 400),
        (json.dumps(CHAT).encode(), {"Content-Type": "text/plain"}, 415),
        (json.dumps(CHAT).encode(), {"Content-Type": "application/xml"}, 415),
        (json.dumps(CHAT).encode(), {"Content-Type": "application/json; charset=utf-16"}, 415),
        (json.dumps(CHAT).encode("utf-16"), {}, 400),
        (b"\x00" * 1000, {}, 400),
        (b'{"model": "stories", "messages": [{"role": "user", "content": "' + b"a" * (5 << 20) + b'"}]}', {}, 413),
    ]
    for data, headers, status in cases:
        r = httpx.post(server.base + "/v1/chat/completions", content=data, headers=AUTH | headers, timeout=TIMEOUT)
        assert_openai_error(r, status)
    assert_healthy(server)


def _stream_and_vanish(server, body: dict[str, Any], after_events: int) -> None:
    """A raw client that reads `after_events` server-sent events and closes its socket."""
    data = json.dumps(body | {"stream": True}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {AUTH['Authorization']}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as sock:
        sock.sendall(head + data)
        got = b""
        while got.count(b"data: ") < after_events:
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")   # RST


def test_streaming_clients_that_vanish_mid_stream(server):
    before = metrics(server)
    for i in range(6):
        _stream_and_vanish(server, CHAT | {"n": 16, "seed": i, "logprobs": True, "top_logprobs": 2},
                           after_events=2 + 3 * i)
    wait_idle(server)
    r = client(server).chat.completions.create(model=MODEL_ID, messages=CHAT["messages"], max_tokens=1)
    assert r.choices[0].finish_reason == "length"
    after = metrics(server)
    moved = {k: after[f'qnnrt_requests_total{{status="{k}"}}'] - before[f'qnnrt_requests_total{{status="{k}"}}']
             for k in ("completed", "cancelled", "failed")}
    assert moved["completed"] + moved["cancelled"] == 7 and moved["cancelled"] >= 3 and moved["failed"] == 0, moved
    assert_healthy(server)


# -- what the server answers is what it publishes ------------------------------------------------------
@pytest.fixture(scope="module")
def published(server) -> dict[str, Any]:
    r = httpx.get(server.base + "/openapi.json", headers=AUTH, timeout=30)
    assert r.status_code == 200 and httpx.get(server.base + "/openapi.json", timeout=30).status_code == 401
    validator = pytest.importorskip("openapi_spec_validator", reason="pip install -e '.[test]'")
    validator.validate(r.json())                                  # OpenAPI 3.1, as served
    return r.json()


def conforms(doc: dict[str, Any], name: str, value: Any) -> None:
    jsonschema.validate(value, {"$ref": f"#/components/schemas/{name}", "components": doc["components"]},
                        cls=jsonschema.Draft202012Validator)


def sse(r: httpx.Response) -> list[dict[str, Any]]:
    lines = [line.removeprefix("data: ") for line in r.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


def test_every_answer_validates_against_the_published_document(server, published):
    """(Tool-call answers: tests/serve/test_serve_structured.py, whose template renders tools briefly.)"""
    doc = published
    chat = CHAT | {"logprobs": True, "top_logprobs": 2, "n": 2}
    conforms(doc, "ChatCompletion", post(server, "/v1/chat/completions", chat).json())
    for chunk in sse(post(server, "/v1/chat/completions", chat | {"stream": True,
                                                                  "stream_options": {"include_usage": True}})):
        conforms(doc, "ChatCompletionChunk", chunk)
    done = {"model": MODEL_ID, "prompt": "Once", "logprobs": 2}
    conforms(doc, "Completion", post(server, "/v1/completions", done).json())
    for chunk in sse(post(server, "/v1/completions", done | {"stream": True,
                                                             "stream_options": {"include_usage": True}})):
        conforms(doc, "Completion", chunk)
    for fmt in ("float", "base64"):
        conforms(doc, "EmbeddingsList", post(server, "/v1/embeddings", {"model": EMB_ID, "input": ["a", "b"],
                                                                        "encoding_format": fmt}).json())
    conforms(doc, "ModelList", httpx.get(server.base + "/v1/models", headers=AUTH, timeout=30).json())
    conforms(doc, "Model", httpx.get(server.base + f"/v1/models/{EMB_ID}", headers=AUTH, timeout=30).json())
    conforms(doc, "Health", httpx.get(server.base + "/health", timeout=30).json())
    for r in (post(server, "/v1/chat/completions", CHAT | {"n": 0}), post(server, "/v1/embeddings", {"model": "x"}),
              post(server, "/v1/completions", b"{", headers={}), httpx.get(server.base + "/nope", timeout=30)):
        conforms(doc, "ErrorBody", r.json())
    assert set(doc["paths"]) >= {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models",
                                 "/health", "/metrics", "/openapi.json"}
    assert doc["components"]["schemas"]["ChatRequest"]["properties"]["model"]["enum"] == [MODEL_ID]
