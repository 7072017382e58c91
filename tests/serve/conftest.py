"""A live `qnnrt serve` on the LLM fixture (a real subprocess on a free port of 127.0.0.1, so signals
are real) and the fixture's 512-token tokenizer folder."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.cli_helpers import ROOT
from tests.helpers.data import LLM_STORIES
from tests.helpers.llm_text import text_folder  # noqa: F401

FIX = LLM_STORIES
MODEL_ID = "stories"
API_KEY = "sk-test-qnnrt"
START_TIMEOUT_S = 600          # vetting + load on a loaded simulator


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    report: Path
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stderr(self) -> str:
        return "".join(self.err)

    def worker_pid(self) -> int | None:
        for line in self.err:
            if line.startswith("qnnrt: worker pid "):
                return int(line.split()[-1])
        return None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)


def _pump(stream, sink: list[str], ready: threading.Event | None) -> None:
    for line in iter(stream.readline, ""):
        sink.append(line)
        if ready is not None and "listening on http://" in line:
            ready.set()


def start_server(tokenizer: Path, report: Path, *extra: str, model: Path = FIX / "model.pte",
                 model_id: str = MODEL_ID) -> Server:
    """`python -m qnnrt.cli serve` on port 0; returns once it listens (the port it prints)."""
    return launch(["serve", str(model), "--tokenizer", str(tokenizer), "--port", "0", "--model-name", model_id,
                   "--report", str(report), *extra], report)


def launch(argv: list[str], report: Path) -> Server:
    """`python -m qnnrt.cli ARGV` from the repository's root (argv must listen on port 0); returns once
    it listens (the port it prints)."""
    pytest.importorskip("starlette", reason="needs the ASGI stack (pip install -e '.[test]')")
    pytest.importorskip("uvicorn", reason="needs the ASGI stack (pip install -e '.[test]')")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               QNNRT_DEBUG_WORKER="1")
    proc = subprocess.Popen([sys.executable, "-m", "qnnrt.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    ready = threading.Event()
    server = Server(proc, 0, report)
    threading.Thread(target=_pump, args=(proc.stdout, server.out, ready), daemon=True).start()
    threading.Thread(target=_pump, args=(proc.stderr, server.err, None), daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready.wait(0.2):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"qnnrt serve did not start: {''.join(server.err)}")
    line = next(x for x in server.out if "listening on http://" in x)
    server.port = int(line.rsplit(":", 1)[1].split("/")[0])
    return server


@pytest.fixture(scope="session")
def embedding_program(tmp_path_factory) -> Path:
    """A tiny MiniLM-shaped embedding program (tests/helpers/embedding_model.py) built with `qnnrt build`
    once per session, over the LLM fixture tokenizer's vocabulary."""
    from tests.helpers.embedding_model import write_model
    from tests.helpers.llm_text import VOCAB
    d = tmp_path_factory.mktemp("embedder")
    model = write_model(d / "embedder.onnx", VOCAB)
    out = d / "program"
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", "build", str(model), "-o", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def server(text_folder, tmp_path_factory):  # noqa: F811
    s = start_server(text_folder, tmp_path_factory.mktemp("serve") / "report.json", "--api-key", API_KEY,
                     "--max-queue", "1")
    yield s
    if s.proc.poll() is None:
        s.stop()
