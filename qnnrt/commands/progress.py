"""A one-line progress bar on stderr for terminals (no dependency)."""
from __future__ import annotations

import sys
import time


class ProgressBar:
    def __init__(self, label: str, width: int = 30):
        self.label, self.width, self._t0, self._last = label, width, time.perf_counter(), 0.0
        self._shown = False

    def update(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        frac = done / total if total else 1.0
        fill = int(frac * self.width)
        sys.stderr.write(f"\r{self.label} [{'#' * fill}{'.' * (self.width - fill)}] "
                         f"{done}/{total} {now - self._t0:.1f}s")
        sys.stderr.flush()
        self._shown = True

    def done(self) -> None:
        if self._shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._shown = False
