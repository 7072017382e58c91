"""`qnnrt run` is never silent on long work: progress lines on stderr when it is not a terminal
(every QNNRT_PROGRESS_INTERVAL seconds, 10 by default), nothing with --quiet."""
from __future__ import annotations

from tests.helpers.cli_helpers import qnnrt


def test_progress_lines_when_stderr_is_not_a_terminal(built_tiny_program, monkeypatch):
    monkeypatch.setenv("QNNRT_PROGRESS_INTERVAL", "0.2")
    r = qnnrt("run", built_tiny_program.out, "--iteration", "2")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("qnnrt run")]
    assert lines, r.stderr
    assert any("iteration 1/2" in x and "graph call" in x and "elapsed" in x for x in lines), lines
    r = qnnrt("run", built_tiny_program.out, "--iteration", "2", "--quiet")
    assert r.returncode == 0, r.stderr
    assert not [x for x in r.stderr.splitlines() if x.startswith("qnnrt run:")], r.stderr
