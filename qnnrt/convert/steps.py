"""Progress lines for a conversion, written whether or not stderr is a terminal (a log or a pipe
gets them too): each long step says what it did, how long it took and the ETA of the whole run,
estimated from the work done so far (weights: a part's weight bytes)."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class Steps:
    """``total`` units of work (e.g. bytes of weights times the passes over them); ``done(label,
    units)`` after each step prints ``convert: <label> (<s> s); <pct>% done, ETA <s> s``."""

    def __init__(self, total: float, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.total, self.enabled = max(total, 1.0), enabled
        self.stream = stream or sys.stderr
        self.t0 = self.last = time.perf_counter()
        self.units = 0.0

    def note(self, text: str) -> None:
        if self.enabled:
            self.stream.write(f"convert: {text}\n")
            self.stream.flush()

    def done(self, label: str, units: float = 0.0) -> None:
        now = time.perf_counter()
        self.units = min(self.total, self.units + units)
        frac = self.units / self.total
        eta = (now - self.t0) * (1 - frac) / frac if frac > 0 else None
        tail = f"; {100 * frac:.0f}% done" + (f", ETA {eta:.0f} s" if eta is not None and frac < 1 else "")
        self.note(f"{label} ({now - self.last:.1f} s){tail}")
        self.last = now

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0
