"""A plan segment in the PD worker (the worker's side of segment.py): the steps rebuilt from their
descriptors over a slot list of the worker's own, run from a given step on each request, the
reply a DONE frame (seconds in graphExecute and in CPU steps, the live-outs not written in place)
or the ERROR frame of the step that failed."""
from __future__ import annotations

import operator
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from qnnrt.errors import QnnError
from qnnrt.runtime.hooks import Tracing
from qnnrt.runtime.hosts.pd import channel as ch
from qnnrt.runtime.hosts.pd import portable
from qnnrt.runtime.hosts.pd import protocol as proto
from qnnrt.runtime.steps import Bookkeeping, GraphStep, Step
from qnnrt.runtime.tracing import step_label

if TYPE_CHECKING:
    from qnnrt.runtime.hosts.pd.worker import WorkerCall


_GRAPH, _TIMED, _UNTIMED = 0, 1, 2
_profile_of = operator.attrgetter("profile")


def _plain_call(step: Step, graph: bool, timed: bool) -> tuple[Callable[[list], Any], int]:
    """How the plain loop calls `step`: a graph step through its binder's entry (the bare
    BoundCall when it has nothing else to do per call), a CPU op timed when the plan is."""
    if graph:
        assert isinstance(step, GraphStep)
        return step.binding.entry, _GRAPH
    return step.run, _TIMED if timed and not isinstance(step, Bookkeeping) else _UNTIMED


class WorkerSegment:
    """A segment in the worker: its steps over a slot list of its own, run on request."""

    def __init__(self, install: proto.InstallSegment, resolver: portable.Resolver,
                 owner: Callable[[object], WorkerCall | None], status: proto.StatusBlock,
                 tracer: Tracing | None = None) -> None:
        self.status, self.tracer = status, tracer
        self.steps = [portable.rebuild(d, resolver) for d in install.steps]
        self.labels = [step_label(s) for s in self.steps]   # the CPU steps a trace names
        # each graph step's worker call (its profile is read after the step), None for CPU steps
        self.owners = [owner(s.binding.call) if isinstance(s, GraphStep) else None for s in self.steps]
        template = {slot: resolver.array(v) if isinstance(v, portable.ArenaArray) else v
                    for slot, v in install.template.items()}
        self.template: list = [None] * install.slots
        for slot, v in template.items():
            self.template[slot] = v
        self.in_place = {slot: v for slot, v in template.items() if isinstance(v, np.ndarray)}
        self.live_out = install.live_out
        self.staged: dict[int, np.ndarray] = {}
        self.values: list = []
        self.timed = install.timed
        for o in self.owners:
            if o is not None:
                o.call.timed = install.timed
        self.graph_owners = [o for o in self.owners if o is not None]
        # the plain loop's calls (no trace, no profile): each step's run and what its seconds are
        self.plain = [(k, *_plain_call(s, o is not None, install.timed))
                      for k, (s, o) in enumerate(zip(self.steps, self.owners))]
        self.profiled = False
        self.calls_changed()

    def calls_changed(self) -> None:
        """A call of this segment records into a profile now (or its profile changed): read
        once here, not on every run."""
        self.profiled = any(map(_profile_of, self.graph_owners))

    def stage(self, view: ch.ArenaView, blocks: dict[int, tuple[ch.Block, tuple[int, ...], str]]) -> None:
        for slot, (block, shape, dtype) in blocks.items():
            self.staged[slot] = view.array(block, shape, np.dtype(dtype))

    def run(self, rid: int, start: int) -> bytes:
        """Steps from `start` (0: a new run on fresh values); the DONE frame, or the ERROR frame
        of a failed step. Without a trace or a profile to feed, the plain loop (what this run
        costs is most of a multi-PD iteration's extra time)."""
        if self.tracer is None and not self.profiled:
            return self._run_plain(rid, start)
        return self._run_observed(rid, start)

    def _run_plain(self, rid: int, start: int) -> bytes:
        """The steps called as the main process's plan loop calls them (runtime/steps.py): a graph
        step's bound C call itself, a CPU step timed only when the main process's plan is."""
        clock = time.perf_counter
        t0 = clock()
        if start == 0:
            self.values = self.template.copy()
        values, status, plain = self.values, self.status, self.plain
        at_step, graph, timed = status.at_step, _GRAPH, _TIMED
        accelerator = cpu = 0.0
        calls = status.segment_graph_calls
        k = start
        try:
            for k, run, kind in (plain if start == 0 else plain[start:]):
                if kind == graph:
                    at_step(k, calls)   # a worker that dies here is named by it
                    accelerator += run(values)
                    calls += 1
                elif kind == timed:
                    t = clock()
                    run(values)
                    cpu += clock() - t
                else:
                    run(values)
        except QnnError as e:
            return self._failed(rid, k, e, 0)
        status.at_step(len(plain), calls)
        tail = self._tail(values, [])
        return ch.done_frame(rid, accelerator, cpu, clock() - t0,
                             b"" if tail is None else proto.dumps(tail))

    def _run_observed(self, rid: int, start: int) -> bytes:
        """The loop with a trace's spans and the profiled calls' events."""
        t0 = time.perf_counter()
        if start == 0:
            self.values = self.template.copy()
        values = self.values
        accelerator = cpu = 0.0
        events: list[tuple[int, list[dict]]] = []
        status, owners, tracer = self.status, self.owners, self.tracer
        calls = first = status.segment_graph_calls
        began = tracer.now() if tracer is not None else 0
        for k in range(start, len(self.steps)):
            step = self.steps[k]
            status.at_step(k, calls)
            at = tracer.now() if tracer is not None else 0
            t_step = time.perf_counter()
            try:
                seconds = step.run(values)
            except QnnError as e:
                return self._failed(rid, k, e, began)
            owner = owners[k]
            if owner is None:   # a CPU step: a worker times its own (its graph calls time themselves)
                if not isinstance(step, Bookkeeping):
                    cpu += time.perf_counter() - t_step
                label = self.labels[k]
                if tracer is not None and label is not None:
                    tracer.span(label, "cpu", at)
                continue
            end = tracer.now() if tracer is not None else 0
            accelerator += seconds
            calls += 1
            ev = owner.profile.events() if owner.profile is not None else None
            if ev is not None:
                events.append((k, ev))
            if tracer is not None:
                tracer.graph_call(owner.key, owner.graph, end, seconds, ev)
        status.at_step(len(self.steps), calls)
        if tracer is not None:
            tracer.span(f"segment {len(self.steps) - start} step(s)", "pd", began,
                        {"graph_calls": calls - first, "from_step": start})
        tail = self._tail(values, events)
        return ch.done_frame(rid, accelerator, cpu, time.perf_counter() - t0,
                             b"" if tail is None else proto.dumps(tail))

    def _failed(self, rid: int, k: int, e: QnnError, began: int) -> bytes:
        """The ERROR frame of a QNN error at step `k` (its trace sent with the next reply)."""
        if self.tracer is not None:
            self.tracer.span("segment (failed)", "pd", began, {"at_step": k, "code": e.code})
        failure = replace(proto.Failure.of(e, traceback.format_exc(limit=8)), at_step=k)
        return ch.body_frame(ch.ERROR, rid, proto.dumps(failure))

    def _tail(self, values: list, events: list[tuple[int, list[dict]]]) -> proto.SegmentTail | None:
        by_value: dict[int, proto.LiveValue] = {}
        for slot in self.live_out:
            v = values[slot]
            if v is self.in_place.get(slot):
                continue
            staged = self.staged.get(slot)
            if staged is not None and isinstance(v, np.ndarray) and v.shape == staged.shape \
                    and v.dtype == staged.dtype:
                np.copyto(staged, v)
            else:
                by_value[slot] = v
        trace = self.tracer.drain() if self.tracer is not None else None
        if not (by_value or events or trace):
            return None
        return proto.SegmentTail(by_value, tuple(events), trace)

