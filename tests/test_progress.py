"""Progress where no terminal is: a line every interval with the count, what it counts and the ETA (a
log file or CI never sees a silent build); nothing from a library left at its default; the line
thread stops with the work."""
from __future__ import annotations

import io
import time

from qnnrt.progress import ProgressBar


def test_lines_with_count_and_eta_when_the_stream_is_not_a_terminal(monkeypatch):
    monkeypatch.setenv("QNNRT_PROGRESS_INTERVAL", "0.05")
    out = io.StringIO()
    with ProgressBar("compiling", 4, enabled=True, stream=out, unit="contexts") as bar:
        bar.update(1, note=" (0 cached)")
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert lines and all(x.startswith("compiling: 1/4 contexts (0 cached), ETA ") for x in lines), lines
    assert all(x.endswith(" s elapsed") for x in lines) and "\r" not in out.getvalue()
    time.sleep(0.2)
    assert out.getvalue().splitlines() == lines        # done(): no line after the work


def test_a_library_default_prints_nothing_off_a_terminal(monkeypatch):
    monkeypatch.setenv("QNNRT_PROGRESS_INTERVAL", "0.05")
    out = io.StringIO()
    with ProgressBar("compiling", 2, stream=out) as bar:
        bar.update(1)
        time.sleep(0.2)
    assert out.getvalue() == ""
