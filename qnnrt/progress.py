"""A one-line progress bar on stderr (no dependency), for the compiler and the commands."""
from __future__ import annotations

import sys
import threading
import time
from typing import Callable, TextIO


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


class Heartbeat:
    """A line on `stream` every `interval` seconds while long work runs where no bar is drawn
    (stderr not a terminal): ``<label>: <status()>, <elapsed> s elapsed``. A daemon thread; use as a
    context manager. `status` must be cheap and safe to call from another thread."""

    def __init__(self, label: str, status: Callable[[], str], interval: float = 10.0,
                 stream: TextIO | None = None):
        self.label, self.status, self.interval = label, status, interval
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()
        self.lines = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="qnnrt-progress", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                text = self.status()
            except Exception:  # noqa: BLE001 - progress must never break the work
                text = "running"
            try:
                self.stream.write(f"{self.label}: {text}, {time.perf_counter() - self.t0:.0f} s "
                                  f"elapsed\n")
                self.stream.flush()
                self.lines += 1
            except (OSError, ValueError):
                return

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
