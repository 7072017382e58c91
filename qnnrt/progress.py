"""A one-line progress bar on stderr (no dependency), for the compiler and the commands."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """Redrawn at most every 0.1 s; shown only where `enabled` (default: stderr is a terminal)."""

    def __init__(self, label: str, total: int = 0, enabled: bool | None = None,
                 stream: TextIO | None = None, width: int = 30):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label, self.total, self.width = label, total, width
        self.t0 = time.perf_counter()
        self._last = 0.0
        self._shown = False

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        total = self.total if total is None else total
        now = time.perf_counter()
        if not self.enabled or (done < total and now - self._last < 0.1):
            return
        self._last = now
        fill = int(self.width * done / total) if total else self.width
        self.stream.write(f"\r{self.label} [{'#' * fill}{'.' * (self.width - fill)}] {done}/{total}"
                          f"{note} {now - self.t0:.1f}s")
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
