"""The main process's handle on one PD worker (a PD host): its process, its channel, what it
reported, and how it stops. Requests go through `channel.Channel` (one at a time, replies matched
by id); the worker's side is runtime/hosts/pd/worker.py."""
from __future__ import annotations

import os
import subprocess
from typing import TypeVar

from qnnrt.core.clock import CLOCK
from qnnrt.errors import QnnError, QnnrtError
from qnnrt.profiling.trace_events import TraceBatch
from qnnrt.runtime.ipc import child
from qnnrt.runtime.hosts.pd import channel as ch
from qnnrt.runtime.hosts.pd import protocol as proto
from qnnrt.runtime.hooks import Tracing
from qnnrt.spawn import python_command, signal_name

R = TypeVar("R")
STOP_GRACE_S = 2.0   # a worker asked to close and still alive after this is killed
CLOSE_WAIT_S = 60.0  # for the close reply: freeing hundreds of contexts takes a while under load


class PdWorkerError(QnnrtError):
    """A PD worker failed: it could not create its contexts, a graph call failed, or it died."""


class PdQnnError(PdWorkerError, QnnError):
    """A QNN call failed inside a PD worker (the worker is fine): a QnnError naming the PD."""


def _worker_command(tail: list[str]) -> list[str]:
    return python_command("from qnnrt.runtime.hosts.pd.worker import main; main()", tail)

class PdWorker:
    """The main process's handle on one worker: its process, its channel, its contexts, and what
    it reported (its status block in the arena, and the replies that carry its vote)."""

    def __init__(self, index: int, keys: list[str], status: proto.StatusBlock, status_at: ch.Block):
        self.index, self.keys = index, list(keys)
        self.proc: subprocess.Popen | None = None
        self.channel: ch.Channel | None = None
        self.pid: int | None = None
        self.status, self.status_at = status, status_at
        self.calls = 0
        self.requests = 0        # run requests (graph calls, plan segments): round trips
        self.channel_s = 0.0     # round trips minus the worker's time in them
        self.execute_s = 0.0
        self.load_seconds: float | None = None
        self.performance: dict | None = None   # the worker's vote counts, from its last reply
        self.gone = False
        self.heap_report: dict | None = None   # the worker's heap profile, sent when it closed
        self._start_id: int | None = None
        self.tracer: Tracing | None = None       # the program's trace: the worker's events go there
        self.clock_offset_ns = 0                 # how far the worker's trace clock is ahead of ours
        self._start_sent_ns = 0

    @property
    def name(self) -> str:
        return f"PD {self.index}" + (f" (worker pid {self.pid})" if self.pid else "")

    def spawn(self) -> None:
        self.proc, end = child.spawn(_worker_command([]), dict(os.environ, **{proto.PARENT_ENV: str(os.getpid())}))
        self.channel = ch.Channel(end)
        self.pid = self.proc.pid

    def absorb(self, batch: TraceBatch | None) -> None:
        """Trace events a reply carried, into the program's trace (on this process's clock)."""
        if batch is not None and self.tracer is not None:
            self.tracer.absorb(batch, self.clock_offset_ns)

    def count(self, calls: int, execute_s: float, channel_s: float) -> None:
        """A request's graph calls, their seconds inside graphExecute, and what the round trip
        cost beyond the worker's work (for a plain call, beyond graphExecute)."""
        self.calls += calls
        self.requests += 1
        self.execute_s += execute_s
        self.channel_s += channel_s

    # -- requests ------------------------------------------------------------------------------
    def gone_error(self, what: str) -> PdWorkerError:
        """The worker ended: mark it gone; the error naming how and while doing `what`."""
        self.gone = True
        rc = self.proc.poll() if self.proc is not None else None
        if rc is None and self.proc is not None:
            try:
                rc = self.proc.wait(0.5)
            except subprocess.TimeoutExpired:
                rc = None
        how = (f"killed by {signal_name(-rc)}" if rc is not None and rc < 0 else
               f"exit status {rc}" if rc is not None else "its channel closed")
        return PdWorkerError(f"{self.name} ended ({how}) while {what}. The main process is fine; "
                             f"the program's workers were stopped. A crash inside QNN or a kill "
                             f"from outside (perhaps the out-of-memory killer) ends a worker.")

    def failure(self, frame: bytes, what: str) -> PdWorkerError:
        """The error a worker's E reply describes: a QNN error stays one (code, log, remedy; the
        recovery policy reads it), naming the PD; a non-qnnrt exception there is a bug in qnnrt
        and says so."""
        f = proto.loads(ch.frame_body(frame), proto.Failure)
        if f.qnn is not None:
            q, where = f.qnn, f"in {self.name}, {what}"
            return PdQnnError(q.function, q.code, q.code_name, q.message, list(q.log_tail), q.remedy,
                              f"{q.context} {where}" if q.context else where)
        if f.internal:
            err = PdWorkerError(f"{self.name}: {what} failed with an internal error (a bug in qnnrt): "
                                f"{f.type_name}: {f.message}\nworker traceback:\n{f.traceback}")
        else:
            err = PdWorkerError(f"{self.name}: {what} failed: {f.message}")
        err.code = f.code  # type: ignore[attr-defined]
        return err

    def control(self, request: proto.Request, answer: type[R], what: str) -> R:
        """Send a control request and return its reply, of kind `answer` (any thread; one request
        at a time)."""
        try:
            frame = self._channel(what).request(proto.dumps(request))
        except OSError:
            raise self.gone_error(what) from None
        return self.reply(frame, answer, what)

    def _channel(self, what: str) -> ch.Channel:
        if self.gone or self.channel is None:
            raise PdWorkerError(f"{self.name} is stopped; {what} is not possible")
        return self.channel

    def reply(self, frame: bytes, answer: type[R], what: str) -> R:
        """The message of kind `answer` a reply frame carries; the error it carries raised; a
        closed channel is the worker's end."""
        if not frame:
            raise self.gone_error(what)
        kind = frame[:1]
        if kind == ch.ERROR:
            raise self.failure(frame, what)
        if kind != ch.REPLY:
            raise ch.ProtocolError(f"{self.name}: a {kind!r} frame in reply to a control request")
        return proto.loads(ch.frame_body(frame), answer)

    def begin_start(self, config: proto.WorkerConfig, what: str) -> None:
        """Send the start request; `finish_start` reads its reply (workers start side by side)."""
        self._start_sent_ns = CLOCK()
        try:
            self._start_id = self._channel(what).begin(proto.dumps(proto.Start(config)))
        except OSError:
            raise self.gone_error(what) from None

    def finish_start(self, what: str) -> None:
        assert self._start_id is not None and self.channel is not None
        started = self.reply(self.channel.finish(self._start_id), proto.Started, what)
        self.load_seconds, self.performance = started.load_seconds, started.performance
        # the clock is system-wide (core/clock.py); should the worker's read another time than
        # any between our request and its reply, its events are moved by the difference
        received = CLOCK()
        if not self._start_sent_ns <= started.clock_ns <= received:
            self.clock_offset_ns = started.clock_ns - received
        self.absorb(started.trace)

    def stop(self) -> None:
        """Ask the worker to close (it frees its contexts), kill it if it does not; idempotent. A
        worker still busy with an earlier request after the grace time is killed."""
        proc, channel = self.proc, self.channel
        if proc is None:
            return
        if not self.gone and proc.poll() is None and channel is not None:
            try:
                if channel.settle(STOP_GRACE_S):
                    frame = channel.request(proto.dumps(proto.Close()), timeout=CLOSE_WAIT_S)
                    if frame[:1] == ch.REPLY:
                        closed = proto.loads(ch.frame_body(frame), proto.Closed)
                        self.heap_report = closed.heap_report
                        self.absorb(closed.trace)
            except (OSError, ch.ProtocolError):
                pass
        child.stop(proc, STOP_GRACE_S)
        self.gone = True
        if channel is not None:
            channel.end.close()
        self.proc = None
