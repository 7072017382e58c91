"""A plan segment run by a PD worker, the main process's side: the step that sends the segment once
and has the worker run it on one request per iteration (the worker's side: worker_segment.py).

The main process sends the segment as descriptors (portable.py): each step's typed description,
with arrays in the shared arena by reference (a planned buffer is the same memory on both sides)
and its bound calls by id (the worker calls the graph it bound for that id, on a BoundCall of the
segment's own); constants travel by value, once, at install; the worker rebuilds the steps. A run
then carries two numbers each way: the dynamic live-in values are copied into arena staging arrays
before the request, the live-out values the worker did not write in place come back through
staging arrays (learned from the first run, which returns them in its reply). A QNN error inside
the segment names the step it stopped at; after recovery the same run resumes there, on the
worker's values.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import numpy as np

from qnnrt.errors import QnnError
from qnnrt.runtime.hosts.pd import channel as ch
from qnnrt.runtime.hosts.pd import portable
from qnnrt.runtime.hosts.pd import protocol as proto
from qnnrt.runtime.segments import Segment
from qnnrt.runtime.steps import GraphStep, SegmentStep

if TYPE_CHECKING:
    from qnnrt.runtime.hosts.pd.handle import PdWorker
    from qnnrt.runtime.plan_context import PlanContext


class RemoteSegment(SegmentStep):
    """The main process's step for a segment its worker runs. `run` returns the seconds inside
    graphExecute (there); `cpu_seconds` the CPU steps' (there)."""

    def __init__(self, segment: Segment, segment_id: int, template: list, context: PlanContext,
                 worker: PdWorker, arena: ch.Arena, call_id_of: Callable[[object], int | None],
                 broken: Callable[[str], NoReturn]) -> None:
        self.segment, self.id, self.template = segment, segment_id, template
        self.context, self.worker, self.arena = context, worker, arena
        self.call_id_of, self.broken = call_id_of, broken
        self.graph_at = {k: s for k, s in enumerate(segment.steps) if isinstance(s, GraphStep)}
        self.graph_calls = len(self.graph_at)
        self.cpu_seconds = 0.0
        # its replies: polled for about as long as the worker's run takes, or waited for blocking
        # when that has been the cheaper way on this machine lately
        self.wait = ch.SpinWait(policy=ch.WaitPolicy())
        self.installed = False
        self.stage_in: list[tuple[int, np.ndarray]] = []
        self.stage_out: list[tuple[int, np.ndarray]] = []
        keys = [s.key for s in self.graph_at.values()]
        self.what = (f"a plan segment of {self.graph_calls} graph call(s) (contexts {keys[0]} .. "
                     f"{keys[-1]}) and {len(segment.steps) - self.graph_calls} CPU step(s)")

    def _install(self, values: list) -> None:
        """Send the steps. A slot the segment touches that holds a planned arena buffer is that
        buffer there too; a live-in is that, a constant (sent once), or staged per run."""
        refs = portable.Refs(self.arena, self.call_id_of)
        entries: dict[int, proto.TemplateValue] = {}
        for slot in self.segment.slots:
            t = self.template[slot]
            if isinstance(t, np.ndarray) and self.arena.block_of(t) is not None:
                entries[slot] = refs.array(t)
        for slot in self.segment.live_in:
            t, v = self.template[slot], values[slot]
            if t is not None and v is t:   # an arena buffer (by reference) or a constant (by value, once)
                entries[slot] = refs.array(t) if isinstance(t, np.ndarray) else t
                continue
            if not isinstance(v, np.ndarray):
                raise ch.ProtocolError(f"segment {self.id}: slot {slot} holds {type(v).__name__}, "
                                       f"not an array, at the start of a run")
            staging = self.arena.alloc(v.shape, v.dtype)[0]
            entries[slot] = refs.array(staging)
            self.stage_in.append((slot, staging))
        steps = tuple(portable.describe(s, refs) for s in self.segment.steps)
        timed = self.context.timed or self.context.tracer is not None
        self.worker.control(proto.InstallSegment(self.id, len(self.template), entries,
                                                 self.segment.live_out, steps, timed),
                            proto.Done, f"installing {self.what}")
        self.installed = True

    def run(self, values: list) -> float:
        if not self.installed:
            self._install(values)
        for slot, staging in self.stage_in:
            np.copyto(staging, values[slot], casting="no")
        try:
            return self._exchange(values, 0)
        except _StepFailed as failed:
            return self._recover(values, failed)

    def _recover(self, values: list, failed: _StepFailed) -> float:
        """The program's recovery policy re-creates what the error calls for; the run resumes at
        the step that failed (where a retry fails next, if it does)."""
        at = [failed.at]

        def resume(_context: object) -> float:
            try:
                return self._exchange(values, at[0])
            except _StepFailed as again:
                at[0] = again.at
                raise again.error from None
        step = self.graph_at[failed.at]
        return self.context.recovery.rerun(step.key, step.graph, failed.error, resume)

    def _exchange(self, values: list, start: int) -> float:
        """One run request from step `start`: the seconds inside graphExecute; a QNN error at a
        graph step raised as _StepFailed."""
        w = self.worker
        tracer = self.context.tracer
        began = tracer.now() if tracer is not None else 0
        t0 = time.perf_counter()
        try:
            frame = w.channel.segment(self.id, start, self.wait)  # type: ignore[union-attr]
        except (OSError, AttributeError):
            self.broken(self.where_stopped())
        rtt = time.perf_counter() - t0
        if tracer is not None:
            tracer.span(f"PD {w.index}: {self.graph_calls} graph call(s)", "pd", began,
                        {"segment": self.id, "from_step": start, "ok": frame[:1] == ch.DONE})
        if frame[:1] != ch.DONE:
            raise self._failure(frame)
        accelerator_s, self.cpu_seconds, busy_s, tail_bytes = ch.parse_done(frame)
        tail = proto.loads(tail_bytes, proto.SegmentTail) if tail_bytes else None
        self.wait.took(rtt, busy_s)
        w.count(self.graph_calls - self._done_before(start), accelerator_s, rtt - busy_s)
        for slot, staging in self.stage_out:
            values[slot] = staging.copy()
        if tail is not None:
            self._take(tail, values)
        return accelerator_s

    def where_stopped(self) -> str:
        """The step the worker was at (from its status block), for the error of a worker that died."""
        step = self.graph_at.get(self.worker.status.read().segment_step)
        if step is None:
            return self.what
        return f"running graph {step.graph!r} of context {step.key!r} ({self.what})"

    def _done_before(self, start: int) -> int:
        """Graph calls before step `start` (a resumed run made those already)."""
        return sum(1 for k in self.graph_at if k < start) if start else 0

    def _failure(self, frame: bytes) -> Exception:
        """The error a failed run's reply carries: _StepFailed for a QNN error at a graph step
        (recovery may resume there), else the worker's error as it is."""
        w = self.worker
        if not frame:
            self.broken(self.where_stopped())
        if frame[:1] != ch.ERROR:
            return ch.ProtocolError(f"{w.name}: a {frame[:1]!r} frame in reply to a segment run")
        at = proto.loads(ch.frame_body(frame), proto.Failure).at_step
        step = self.graph_at.get(at) if at is not None else None
        err = w.failure(frame, f"graph {step.graph!r} of context {step.key!r}" if step else self.what)
        if step is None or at is None or not isinstance(err, QnnError):
            return err
        return _StepFailed(err, at)

    def _take(self, tail: proto.SegmentTail, values: list) -> None:
        """Live-outs sent by value (then staged from now on) and the profiled calls' events."""
        blocks: dict[int, tuple[ch.Block, tuple[int, ...], str]] = {}
        for slot, v in tail.values.items():
            values[slot] = v
            if isinstance(v, np.ndarray) and v.nbytes:
                staging, block = self.arena.alloc(v.shape, v.dtype)
                self.stage_out.append((slot, staging))
                blocks[slot] = (block, tuple(v.shape), v.dtype.str)
        if blocks:
            self.worker.control(proto.StageOutputs(self.id, blocks), proto.Done,
                                f"staging the outputs of {self.what}")
        for k, events in tail.events:
            step = self.graph_at[k]
            step.binding.deliver_profile(events)
        self.worker.absorb(tail.trace)


class _StepFailed(Exception):
    """A QNN error at graph step `at` of a segment run."""

    def __init__(self, error: QnnError, at: int) -> None:
        super().__init__(str(error))
        self.error, self.at = error, at
