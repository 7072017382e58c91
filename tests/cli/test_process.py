"""The CLI's process model (qnnrt.cli.process): a spawned worker per command that stops with its
parent, on SIGINT / SIGTERM / SIGHUP, with honest exit codes, and never leaves a process behind."""
from __future__ import annotations

import ctypes
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qnnrt._capi import log
from tests.helpers.cli_helpers import ROOT

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="signals and /proc: Linux")


def _start(*args: str, stderr=subprocess.PIPE) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT, QNNRT_DEBUG_WORKER="1")
    env.pop("QNNRT_NO_FORK", None)
    return subprocess.Popen([sys.executable, "-m", "qnnrt.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=stderr, env=env, start_new_session=True)


def _worker_pid(proc: subprocess.Popen, stderr_path: Path | None = None) -> int:
    """The worker's pid, from the line QNNRT_DEBUG_WORKER=1 prints."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if stderr_path is not None:
            text = stderr_path.read_text() if stderr_path.exists() else ""
            for line in text.splitlines():
                if line.startswith("qnnrt: worker pid "):
                    return int(line.split()[-1])
            time.sleep(0.02)
        else:
            line = proc.stderr.readline().decode()
            if line.startswith("qnnrt: worker pid "):
                return int(line.split()[-1])
    raise AssertionError("the worker pid was never printed")


def _alive(pid: int) -> bool:
    """Running (not a zombie, not reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return not _alive(pid)


def _wait_running(out_dir: Path, timeout: float = 60) -> None:
    """Until the run writes its first output (load done, iterations under way)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(out_dir.glob("output_*.raw")):
            return
        time.sleep(0.02)
    raise AssertionError("the run never started iterating")


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_stop_signal_to_the_cli_stops_the_worker(tmp_path, small_binary, sig, code):
    out = tmp_path / "out"
    out.mkdir()
    p = _start("run", str(small_binary.path), "--iteration", "100000", "--output-dir", str(out))
    worker = _worker_pid(p)
    _wait_running(out)
    t0 = time.monotonic()
    os.kill(p.pid, sig)
    assert p.wait(timeout=5) == code, p.stderr.read().decode()
    assert _gone_within(worker, 1.0), "the worker outlived the CLI"
    assert time.monotonic() - t0 < 1.5
    n = len(list(out.glob("output_*.raw")))
    time.sleep(0.5)
    assert len(list(out.glob("output_*.raw"))) == n, "outputs kept being written after the stop"
    assert not list(out.glob(".*.tmp")), "a temp file was left behind"


def test_sigkill_to_the_cli_takes_the_worker_with_it(tmp_path, small_binary):
    """The parent cannot forward SIGKILL: the worker's parent-death signal ends it."""
    out = tmp_path / "out"
    out.mkdir()
    p = _start("run", str(small_binary.path), "--iteration", "100000", "--output-dir", str(out))
    worker = _worker_pid(p)
    _wait_running(out)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=5)
    assert _gone_within(worker, 1.0), "the worker was orphaned"


@pytest.mark.slow
def test_sigint_during_qnn_calls_exits_130_every_time(tmp_path, small_binary):
    """Ctrl-C as a terminal sends it (to the whole process group), at random moments of a run whose
    QNN log callback fires ~20 times per graphExecute (--log-level info): never lost."""
    rng = random.Random(0)
    for attempt in range(20):
        err = tmp_path / f"err{attempt}.txt"
        with open(err, "wb") as f:
            p = _start("run", str(small_binary.path), "--iteration", "100000", "--log-level", "info",
                       stderr=f)
            worker = _worker_pid(p, err)
            deadline = time.monotonic() + 60
            while "Vec workers synced" not in err.read_text(errors="replace"):  # executing
                assert time.monotonic() < deadline and p.poll() is None
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.3))
            os.killpg(p.pid, signal.SIGINT)
            rc = p.wait(timeout=5)
        text = err.read_text(errors="replace")
        assert rc == 130, f"attempt {attempt}: exit {rc}\n{text[-2000:]}"
        assert "Exception ignored" not in text, f"attempt {attempt}: {text[-2000:]}"
        assert _gone_within(worker, 1.0)


@pytest.mark.slow
def test_a_worker_killed_from_outside_is_reported_as_such(tmp_path, small_binary):
    out = tmp_path / "out"
    out.mkdir()
    p = _start("run", str(small_binary.path), "--iteration", "100000", "--output-dir", str(out))
    worker = _worker_pid(p)
    _wait_running(out)
    os.kill(worker, signal.SIGKILL)  # as the OOM killer would
    assert p.wait(timeout=5) == 137
    err = p.stderr.read().decode()
    assert "terminated by SIGKILL" in err and "out-of-memory" in err, err
    assert "corrupt" not in err


def test_log_callback_defers_an_interrupt_until_the_qnn_call_returns():
    """An interrupt raised inside the C callback is kept and raised by the next Backend.check,
    never printed as 'Exception ignored' and dropped."""
    def sink(level: int, text: str) -> None:
        raise KeyboardInterrupt

    cb = log.make_log_callback(sink)
    call = ctypes.cast(cb, ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint64,
                                            ctypes.c_void_p))
    call(None, 1, 0, None)  # through C, as QNN calls it (no format: no va_list read)
    assert log.has_pending()
    with pytest.raises(KeyboardInterrupt):
        log.raise_pending()
    assert not log.has_pending()


def test_worker_output_is_the_commands_own(small_binary):
    """stdout is inherited by the worker: --json output is exactly the JSON, nothing of the parent."""
    import json

    from tests.helpers.cli_helpers import qnnrt as cli
    r = cli("inspect", small_binary.path, "--json")
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)
