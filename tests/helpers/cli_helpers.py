"""Run the qnnrt CLI in a subprocess (so a crash would show as a signal, not kill pytest)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def qnnrt(*args: str, timeout: float = 600, cwd: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, cwd=cwd, env=env)
    assert r.returncode >= 0, f"killed by signal {signal.Signals(-r.returncode).name}: {r.stderr}"
    return r
