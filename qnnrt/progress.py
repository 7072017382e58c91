"""A one-line progress bar on stderr (no dependency), for the compiler and the commands."""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, TextIO


INTERVAL_ENV = "QNNRT_PROGRESS_INTERVAL"


def progress_interval() -> float:
    """Seconds between progress lines where no bar can be drawn (stderr a pipe or a file): the
    environment's QNNRT_PROGRESS_INTERVAL, default 10."""
    try:
        return max(0.05, float(os.environ.get(INTERVAL_ENV, "10")))
    except ValueError:
        return 10.0


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class ProgressBar:
    """How far long work is. On a terminal, a bar redrawn at most every 0.1 s; elsewhere (a pipe, a
    log file, CI) a line every progress_interval() s with the count, what it counts and the ETA, from a
    daemon thread so one long step does not look like a hang. `enabled`: None shows it only on a
    terminal (a library's default), True everywhere (the CLI's), False never. Call done() at the end
    (or use it as a context manager)."""

    def __init__(self, label: str, total: int = 0, enabled: bool | None = None,
                 stream: TextIO | None = None, width: int = 30, unit: str = ""):
        self.stream = stream or sys.stderr
        tty = _is_terminal(self.stream)
        self.enabled = tty if enabled is None else enabled
        self.label, self.total, self.width, self.unit = label, total, width, unit
        self.t0 = time.perf_counter()
        self._last = 0.0
        self._shown = False
        self._done, self._note = 0, ""
        self._lines: Heartbeat | None = None
        if self.enabled and not tty:
            self._lines = Heartbeat(label, self._status, progress_interval(), self.stream).__enter__()

    def _status(self) -> str:
        done, total, unit = self._done, self.total, f" {self.unit}" if self.unit else ""
        text = f"{done}/{total}{unit}{self._note}" if total else f"{done}{unit}{self._note}"
        elapsed = time.perf_counter() - self.t0
        if total and 0 < done < total:
            text += f", ETA {elapsed / done * (total - done):.0f} s"
        return text

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        self._done, self._note = done, note
        if total is not None:
            self.total = total
        if self._lines is not None or not self.enabled:
            return
        now = time.perf_counter()
        if done < self.total and now - self._last < 0.1:
            return
        self._last = now
        fill = int(self.width * done / self.total) if self.total else self.width
        self.stream.write(f"\r{self.label} [{'#' * fill}{'.' * (self.width - fill)}] {done}/{self.total}"
                          f"{note} {now - self.t0:.1f}s")
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        if self._lines is not None:
            self._lines.__exit__(None, None, None)
            self._lines = None
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()


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
