"""`qnnrt run --residency multi-pd` through the CLI: the summary shows each PD; SIGTERM / SIGINT to
the CLI stop every PD worker (no process outlives the command)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers.cli_helpers import ROOT, qnnrt

MULTI = ("--residency", "multi-pd:3", "--pd-budget", "64MiB")   # PD 0 here, 2 workers


def _descendants(pid: int) -> dict[int, str]:
    """pid -> command line of every process below `pid`."""
    kids: dict[int, list[int]] = {}
    cmd: dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().split(")")[-1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd[int(d)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = {}, [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out[k] = cmd.get(k, "")
            todo.append(k)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_run_summary_shows_each_pd(chain12, tmp_path):
    rep = tmp_path / "r.json"
    r = qnnrt("run", chain12.model, *MULTI, "--iteration", 3, "--report", rep)
    assert r.returncode == 0, r.stderr
    assert "PD 0 (this process, pid" in r.stdout and "no channel" in r.stdout
    assert "HTP devices: the backend reports one HTP device with one core: every PD on it" in r.stdout
    assert "PD 1 (worker pid" in r.stdout and "PD 2 (worker pid" in r.stdout
    res = json.loads(rep.read_text())["residency"]
    assert res["pds"] == 3 and res["creates"] == 12 and res["evictions"] == 0
    assert [w["in_process"] for w in res["pd_workers"]] == [True, False, False]
    assert all(w["channel_us_per_call"] > 0 for w in res["pd_workers"][1:])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig, in_process", [(signal.SIGTERM, False), (signal.SIGINT, False),
                                             (signal.SIGKILL, True)])
def test_stop_signal_stops_every_pd_worker(chain12, sig, in_process):
    """SIGTERM / SIGINT to the CLI: a clean stop; SIGKILL to the process holding the program (no
    CLI worker in between): its PD workers die with it."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if in_process:
        env["QNNRT_NO_FORK"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "qnnrt.cli", "run", str(chain12.model), *MULTI,
                             "--iteration", "1000000", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        workers: dict[int, str] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(workers) < 2:
            time.sleep(0.2)
            workers = {p: c for p, c in _descendants(proc.pid).items() if "hosts.pd.worker" in c}
        assert len(workers) == 2, "the PD workers did not start"
        time.sleep(1.0)  # running iterations now
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == (-sig if in_process else 128 + sig), err
    assert "Traceback" not in err
    for _ in range(50):
        if not any(_alive(p) for p in workers):
            break
        time.sleep(0.1)
    assert not any(_alive(p) for p in workers), "a PD worker outlived the command"


def test_progress_lines_during_a_multi_pd_run(chain12, tmp_path, monkeypatch):
    """No terminal, a progress line every 0.05 s while graph calls go through two workers (each
    line reads the residency summary from the heartbeat thread), many iterations: the run
    completes, and its outputs are byte-equal to one PD's. This was the seed-000 failure: a
    progress line's summary request desynchronized a worker's channel."""
    monkeypatch.setenv("QNNRT_PROGRESS_INTERVAL", "0.05")
    one, multi = tmp_path / "one", tmp_path / "multi"
    args = ("--iteration", 60)
    r1 = qnnrt("run", chain12.model, "--residency", "auto", *args, "--output-dir", one)
    assert r1.returncode == 0, r1.stderr
    r = qnnrt("run", chain12.model, *MULTI, *args, "--output-dir", multi, "--report", tmp_path / "r.json")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("qnnrt run: iteration")]
    assert len(lines) >= 3, r.stderr     # the heartbeat really read state during the run
    res = json.loads((tmp_path / "r.json").read_text())["residency"]
    assert res["pds"] == 3 and res["creates"] == 12 and res["evictions"] == 0
    assert [w["graph_calls"] for w in res["pd_workers"][1:]] == [60 * 4, 60 * 4]
    files = sorted(p.name for p in one.iterdir())
    assert files and files == sorted(p.name for p in multi.iterdir())
    for name in files:
        assert (one / name).read_bytes() == (multi / name).read_bytes(), name
