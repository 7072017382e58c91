"""Vetting in "worker" mode (runtime/vet/policy.py): the calling process is itself the disposable one (the
CLI's worker, cli/process.py). The risky QNN steps in progress are mirrored into a small file the
parent created, so that if this process dies the parent names the binary and step, and if a step
stays there past its stall timeout the parent stops the worker and says so."""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qnnrt.runtime.vet.policy import (STEP_FILE_ENV, VetReport, VetResult, describe_step, stall_advice,
                                      stall_seconds)
from qnnrt.runtime.vet.protocol import hook_delay

if TYPE_CHECKING:
    from qnnrt.core.binary import ContextBinary


class StepWatch:
    """The risky QNN steps in progress in this (worker) process, mirrored into a small file its
    parent created: if this process dies, the parent names the binary and step; if a step stays
    there past its stall timeout, the parent stops the worker and says so. One line per step in
    progress: ``<start time>\\t<stall seconds or -1>\\t<what>``. Thread-safe (the residency pool
    creates contexts on a prefetch thread)."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._steps: dict[int, str] = {}
        self._next = 0
        self.keys: set[str] = set()   # the pool keys of the binaries watched

    @classmethod
    def from_env(cls) -> StepWatch | None:
        path = os.environ.get(STEP_FILE_ENV)
        if not path or not os.path.isfile(path):
            return None
        return cls(path)

    def begin(self, stage: str, what: str, stall_s: float | None) -> int:
        with self._lock:
            token = self._next
            self._next += 1
            self._steps[token] = f"{time.time():.3f}\t{-1 if stall_s is None else stall_s:.3f}\t{what}"
            self._write()
        delay = hook_delay(stage)
        if delay:
            time.sleep(delay)
        return token

    def end(self, token: int) -> None:
        with self._lock:
            if self._steps.pop(token, None) is not None:
                self._write()

    def step(self, stage: str, what: str, stall_s: float | None) -> _Step:
        return _Step(self, stage, what, stall_s)

    def _write(self) -> None:
        data = "".join(s + "\n" for s in self._steps.values()).encode("utf-8", "replace")
        try:  # opened per write: a few steps per binary, and nothing to close or leak
            fd = os.open(self.path, os.O_WRONLY)
            try:
                os.write(fd, data)
                os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
        except OSError:
            pass  # the note only improves a crash message; the work goes on without it


class _Step:
    def __init__(self, watch: StepWatch, stage: str, what: str, stall_s: float | None):
        self.args = (watch, stage, what, stall_s)
        self.token = -1

    def __enter__(self) -> None:
        watch, stage, what, stall_s = self.args
        self.token = watch.begin(stage, what, stall_s)

    def __exit__(self, *exc: object) -> None:
        self.args[0].end(self.token)


def watch_binaries(binaries: dict[str, ContextBinary], watch: StepWatch) -> VetReport:
    """"worker" mode: read each binary's info here, under the step note; the pool notes the
    creation and first run of each of their contexts (it gets `watch`, whose keys are these)."""
    report = VetReport("worker")
    for key, b in binaries.items():
        with watch.step("info", describe_step("info", b.where), stall_seconds(b.size)):
            b.info  # noqa: B018 - reading it is the step
        watch.keys.add(key)
        report.results.append(VetResult(b.where, "", "watched"))
    return report


@dataclass
class NotedStep:
    since: float
    stall_s: float | None
    what: str


def read_steps(path: str) -> list[NotedStep]:
    """The steps a worker's note holds (lines cut by a write in progress are skipped)."""
    try:
        with open(path, "rb") as f:
            text = f.read(1 << 16).decode("utf-8", "replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split("\t", 2)
        try:
            since, stall = float(parts[0]), float(parts[1])
        except (ValueError, IndexError):
            continue
        if len(parts) == 3:
            out.append(NotedStep(since, None if stall < 0 else stall, parts[2]))
    return out


def stalled_step(steps: list[NotedStep], now: float | None = None) -> NotedStep | None:
    now = time.time() if now is None else now
    for s in steps:
        if s.stall_s is not None and now - s.since > s.stall_s:
            return s
    return None


def worker_crash_message(signal: str, steps: list[NotedStep]) -> str | None:
    """The CLI's message for a worker that died of `signal` inside a noted step (None: no note)."""
    if not steps:
        return None
    what = " and ".join(s.what for s in steps)
    return (f"the QNN library crashed ({signal}) while {what}: the binary is corrupt or not built "
            f"for this QNN version: rebuild it.")


def worker_stall_message(step: NotedStep) -> str:
    return (f"QNN made no progress for {time.time() - step.since:.0f} s while {step.what}; the "
            f"worker was stopped. {stall_advice()}")
