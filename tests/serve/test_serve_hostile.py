"""`qnnrt serve` against hostile clients (issue 47), on one live server: slow and idle connections,
huge prompts, evil chat templates (chosen by the message text, so one server holds them all), and,
last, SIGTERM with queued streams. Timeouts are short (--header-timeout 2) to keep the wall time small."""
from __future__ import annotations

import socket
import time

import pytest

from tests.helpers.llm_text import write_tokenizer_folder
from tests.serve.conftest import API_KEY, MODEL_ID, start_server

httpx = pytest.importorskip("httpx", reason="needs httpx (pip install -e '.[test]')")

pytestmark = pytest.mark.slow
AUTH = {"Authorization": f"Bearer {API_KEY}"}
HEADER_TIMEOUT = 2
MAX_CONNECTIONS = 150
SLOW_CLIENTS = 200


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tok = write_tokenizer_folder(tmp_path_factory.mktemp("tok_hostile"))
    s = start_server(tok, tmp_path_factory.mktemp("serve") / "report.json", "--api-key", API_KEY,
                     "--max-queue", "2", "--header-timeout", str(HEADER_TIMEOUT),
                     "--max-connections", str(MAX_CONNECTIONS))
    yield s
    if s.proc.poll() is None:
        s.stop()


def _timed(fn) -> tuple[httpx.Response, float]:
    t = time.monotonic()
    r = fn()
    return r, time.monotonic() - t


def _health(server) -> tuple[httpx.Response, float]:
    return _timed(lambda: httpx.get(server.base + "/health", timeout=30))


def _completion(server) -> tuple[httpx.Response, float]:
    body = {"model": MODEL_ID, "prompt": "Once", "max_tokens": 1, "temperature": 0}
    return _timed(lambda: httpx.post(server.base + "/v1/completions", json=body, headers=AUTH, timeout=60))


def _closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` (None: still open after ``seconds``)."""
    t = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except socket.timeout:
        return None
    except OSError:
        pass
    return time.monotonic() - t


def test_slow_and_idle_connections_starve_nobody(server):
    """200 connections that send nothing or half a header (more than --max-connections): /health
    and a completion answer in under a second; each slow one is closed at the header timeout."""
    socks = []
    try:
        for i in range(SLOW_CLIENTS):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            if i % 2:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        time.sleep(0.3)
        r, took = _health(server)
        assert r.status_code == 200 and took < 1, (r.status_code, took)
        r, took = _completion(server)
        assert r.status_code == 200 and took < 1, (r.status_code, r.text, took)
        closed = _closed_within(socks[-1], HEADER_TIMEOUT + 5)
        assert closed is not None, "a half-sent header kept its connection past --header-timeout"
    finally:
        for s in socks:
            s.close()


def test_a_header_sent_a_byte_at_a_time_is_cut_at_the_timeout(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        t = time.monotonic()
        with pytest.raises(OSError):
            for _ in range(40):
                s.sendall(b"X")
                time.sleep(0.25)
        assert time.monotonic() - t < HEADER_TIMEOUT + 3


def test_a_body_that_stops_coming_is_cut_and_the_connection_closed(server):
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['Authorization']}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{").encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(head)
        closed = _closed_within(s, 25)
    assert closed is not None and closed < 20         # the body clock: 15 s without a byte
    assert _health(server)[0].status_code == 200


def test_a_kept_alive_connection_is_reused_then_closed_when_idle(server):
    with httpx.Client(timeout=30) as c:
        for _ in range(3):
            assert c.get(server.base + "/health").status_code == 200
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        closed = _closed_within(s, 15)
    assert closed is not None and closed < 8           # keep-alive: 5 s


def test_the_server_lives_and_has_no_traceback(server):
    r = httpx.get(server.base + "/metrics", headers=AUTH, timeout=30)
    assert r.status_code == 200
    assert server.proc.poll() is None and "Traceback" not in server.stderr()

