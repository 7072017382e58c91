"""An internal error (an exception that is not a qnnrt error) is told as a bug in qnnrt, never as a
bare Python message: the type and message on stderr, and a bug report file (traceback, command
line, versions) whose path the message names; exit status 1."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.cli_helpers import ROOT

# imported by every interpreter started with this folder on PYTHONPATH: the CLI's parent and its
# spawned worker alike; `qnnrt inspect` then fails the way the multi-PD desynchronization did
SITECUSTOMIZE = '''
import qnnrt.cli.inspect as inspect_cli

def broken(args):
    a, b, c, d, e = ("summary", {})
inspect_cli.run = broken
'''


def test_internal_error_names_a_bug_and_writes_a_report(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    bugs = tmp_path / "bugs"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]),
               QNNRT_BUG_REPORT_DIR=str(bugs))
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", "inspect", "model.bin"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "qnnrt inspect: internal error (a bug in qnnrt, not in your input)" in r.stderr, r.stderr
    assert "ValueError: not enough values to unpack (expected 5, got 2)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    reports = list(bugs.glob("qnnrt-bug-*.txt"))
    assert len(reports) == 1 and str(reports[0]) in r.stderr, (reports, r.stderr)
    text = reports[0].read_text()
    assert "command: qnnrt inspect model.bin" in text
    assert "Traceback (most recent call last)" in text and "a, b, c, d, e = " in text
    assert "qnnrt: 0.1.0" in text and "onnxruntime-qnn:" in text and "python: " in text


def test_a_user_error_stays_a_plain_error(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, QNNRT_BUG_REPORT_DIR=str(tmp_path / "bugs"))
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", "inspect", str(tmp_path / "missing.bin")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "qnnrt inspect: error:" in r.stderr, r.stderr
    assert "internal error" not in r.stderr and not (tmp_path / "bugs").exists()
