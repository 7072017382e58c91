"""The trace of a whole run as one Chrome trace-event file (Perfetto UI, chrome://tracing): a track per
process (this one and each PD worker), slices for context creation / free / eviction, graph
executions, CPU steps, runs, recoveries and whatever the layers above time (LLM phases, serve
requests), counters for live contexts, PD bytes and heap samples.

`Tracer` is an observer like the heap and execution profilers: the runtime tells it what happened
(as the pool's hooks, through the graph-call observer of the binders, from the plans), it never
drives anything. A PD worker has a tracer of its own whose events go back to the main process with
its replies (`drain` there, `absorb` here). Bounded: after `max_events` events every later one is
counted and dropped, and the file says so (its metadata and an instant where the cap was reached).
"""
from __future__ import annotations

import json
import os
import threading
from collections import Counter
from typing import Any

from qnnrt.errors import QnnrtError
from qnnrt.fileio import check_output_path, write_atomic
from qnnrt.profiling.exec_profile import classify_event, clean_op_name
from qnnrt.profiling.trace_events import (CLOCK, CLOCK_NOTE, Mark, Sample, Span, TraceArgs, TraceBatch,
                                          TraceEvent, chrome_event, metadata, shifted)

__all__ = ["Tracer", "DEFAULT_MAX_EVENTS", "MAIN_PROCESS"]

DEFAULT_MAX_EVENTS = 200_000     # ~25 MB of JSON; a run that makes more says so in the file
MAIN_PROCESS = "qnnrt main process (PD 0)"
_HEAP_COUNTERS = {"host": "host heap (bytes)", "dsp": "DSP heap (bytes)"}


class Scope:
    """A slice from `__enter__` to `__exit__` (an exception adds its type as `error`); `note` adds
    arguments learned inside it."""
    __slots__ = ("tracer", "name", "cat", "args", "t0")

    def __init__(self, tracer: Tracer, name: str, cat: str, args: TraceArgs | None) -> None:
        self.tracer, self.name, self.cat, self.args = tracer, name, cat, args
        self.t0 = 0

    def note(self, **args: str | int | float | bool | None) -> None:
        self.args = {**(self.args or {}), **args}

    def __enter__(self) -> Scope:
        self.t0 = CLOCK()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is not None:
            self.note(error=kind.__name__)
        self.tracer.span(self.name, self.cat, self.t0, self.args)


def execute_figures(events: list[dict[str, Any]]) -> tuple[TraceArgs, list[tuple[str, int | None, float]]]:
    """From one graph execution's QNN profile events: its headline figures (qnn_us, accel_us, cycles)
    and its ops in order (name, op id, cycles or us) as the detailed level reports them."""
    figures: TraceArgs = {}
    ops: list[tuple[str, int | None, float]] = []
    for ev in events:
        kind = classify_event(str(ev.get("name", "")), str(ev.get("unit", "")), "execute")
        if kind is None:
            continue
        figures[kind] = ev.get("value", 0)
        subs = ev.get("sub") or []
        if subs and (kind == "cycles" or not ops):
            ops = [(*clean_op_name(str(s.get("name", ""))), float(s.get("value", 0) or 0)) for s in subs]
    return figures, ops


class Tracer:
    """Collects a run's trace (thread-safe); `write` makes the file (`close` writes it to `path`)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, max_events: int = DEFAULT_MAX_EVENTS,
                 process: str = MAIN_PROCESS) -> None:
        if max_events < 1:
            raise QnnrtError(f"trace max_events {max_events}: give 1 or more")
        self.path = check_output_path(os.fspath(path), "trace") if path is not None else None
        self.max_events = int(max_events)
        self.pid = os.getpid()
        self.process = process
        self.origin_ns = CLOCK()
        self._lock = threading.Lock()
        self._here = threading.local()
        self._events: dict[int, list[TraceEvent]] = {self.pid: []}
        self._names: dict[int, str] = {self.pid: process}
        self._threads: dict[int, dict[int, str]] = {self.pid: {}}
        self._kept = 0               # events kept so far (every process's), against max_events
        self._dropped = 0
        self._capped_at: int | None = None
        self._starts: dict[tuple[int, str], int] = {}   # (thread, context) -> start of a create / free
        self._live: Counter[str] = Counter()
        self._pd: dict[str, int] = {}                   # context -> QNN's reported reservation
        self._created: set[str] = set()
        self.written: str | None = None

    # -- recording -------------------------------------------------------------------------------
    @staticmethod
    def now() -> int:
        return CLOCK()

    def _tid(self) -> int:
        """This thread's id, its name noted the first time (cached per thread: a traced call reads it)."""
        try:
            return self._here.tid
        except AttributeError:
            tid = self._here.tid = threading.get_native_id()
            self._threads[self.pid][tid] = threading.current_thread().name
            return tid

    def _add(self, event: TraceEvent) -> None:
        with self._lock:
            if self._kept >= self.max_events:
                self._dropped += 1
                if self._capped_at is None:
                    self._capped_at = CLOCK()
                return
            self._kept += 1
            self._events[self.pid].append(event)

    def span(self, name: str, cat: str, start_ns: int, args: TraceArgs | None = None,
             end_ns: int | None = None) -> None:
        """A slice on this thread from `start_ns` to `end_ns` (default: now)."""
        self._add(Span(name, cat, self._tid(), start_ns, CLOCK() if end_ns is None else end_ns, args))

    def scope(self, name: str, cat: str, args: TraceArgs | None = None) -> Scope:
        """`with tracer.scope(...)`: a slice around the block."""
        return Scope(self, name, cat, args)

    def instant(self, name: str, cat: str, args: TraceArgs | None = None) -> None:
        self._add(Mark(name, cat, self._tid(), CLOCK(), args))

    def count(self, name: str, values: dict[str, int | float]) -> None:
        """The counter track `name` takes `values` from now on."""
        self._add(Sample(name, CLOCK(), values))

    def graph_call(self, context: str, graph: str, end_ns: int, seconds: float,
                   events: list[dict[str, Any]] | None = None) -> None:
        """A graph execution that ended at `end_ns` after `seconds` inside graphExecute; with its
        QNN profile `events`, its figures as arguments and, at the detailed level, one slice per
        op under it (laid out in order, each as long as its share of the cycles: QNN gives no
        per-op timestamps)."""
        start = end_ns - int(seconds * 1e9)
        args: TraceArgs = {"context": context, "graph": graph}
        if not events:   # not profiled: the slice alone
            self._add(Span(f"{context} {graph}", "graph", self._tid(), start, end_ns, args))
            return
        figures, ops = execute_figures(events)
        args.update(figures)
        total = sum(v for _, _, v in ops)
        spans: list[tuple[str, int, int, TraceArgs]] = []
        if total > 0:   # ops of no cost (fused away, QNN says 0) get no slice
            at, span = start, end_ns - start
            unit = "cycles" if "cycles" in args else "us"
            for name, op_id, value in ops:
                dur = int(span * value / total)
                if dur > 0:
                    spans.append((name, at, at + dur, {unit: value, "op_id": op_id}))
                at += dur
            args["ops"] = len(ops)
        tid = self._tid()
        self._add(Span(f"{context} {graph}", "graph", tid, start, end_ns, args))
        for name, a, b, op_args in spans:
            self._add(Span(name, "op", tid, a, b, op_args))

    # -- as the context pool's hooks (runtime/hooks.py PoolHooks) ----------------------------------
    @property
    def dsp(self) -> None:
        return None     # the heap profiler probes DSP memory profiling; the trace only shows it

    def before_create(self, context: str) -> None:
        self._starts[(self._tid(), context)] = CLOCK()

    def after_create(self, context: str, ok: bool, pd_estimate_bytes: int | None = None,
                     again: bool | None = None) -> None:
        """`again`: the pool created this context before (default: this tracer saw it created)."""
        tid = self._tid()
        start = self._starts.pop((tid, context), None) or CLOCK()
        if again is None:
            again = context in self._created
        args: TraceArgs = {"context": context, "ok": ok}
        if pd_estimate_bytes is not None:
            args["pd_estimate_bytes"] = int(pd_estimate_bytes)
        if ok:
            with self._lock:
                self._created.add(context)
                self._live[context] += 1
                if pd_estimate_bytes:
                    self._pd[context] = int(pd_estimate_bytes)
        self._add(Span(f"{'re-create' if again else 'create'} {context}" + ("" if ok else " (failed)"),
                       "context", tid, start, CLOCK(), args))
        if ok:
            self._counters()

    def before_free(self, context: str, evicted: bool = False) -> None:
        self._starts[(self._tid(), "free " + context)] = CLOCK()

    def after_free(self, context: str, evicted: bool = False) -> None:
        tid = self._tid()
        start = self._starts.pop((tid, "free " + context), None) or CLOCK()
        with self._lock:
            if self._live[context] > 0:
                self._live[context] -= 1
            if not self._live[context]:
                del self._live[context]
        self._add(Span(f"{'evict' if evicted else 'free'} {context}", "context", tid, start, CLOCK(),
                       {"context": context, "evicted": evicted}))
        self._counters()

    def mark(self, event: str, **info: Any) -> None:
        """A residency decision or note (pd_exhausted, prefetch_failed, recovered, ...)."""
        self.instant(event, "residency", {k: _scalar(v) for k, v in info.items()})

    def record_dsp_events(self, context: str, events: list[dict[str, Any]]) -> int:
        return 0     # DSP heap values reach the trace as the heap profiler's samples

    def _counters(self) -> None:
        with self._lock:
            live = sum(self._live.values())
            pd = sum(self._pd.get(k, 0) * n for k, n in self._live.items())
        self.count("live contexts", {"live": live})
        self.count("PD in use (bytes, QNN's reservations)", {"pd_bytes": pd})

    def heap_sampled(self, event: str, values: dict[str, dict[str, int]]) -> None:
        """A heap profiler's sample (profiling.heap.HeapProfiler.listen): host and DSP heap."""
        for source, name in _HEAP_COUNTERS.items():
            if values.get(source):
                self.count(name, dict(values[source]))

    # -- between processes -------------------------------------------------------------------------
    def drain(self) -> TraceBatch | None:
        """This process's events since the last drain (a PD worker's, for its next reply)."""
        with self._lock:
            events, self._events[self.pid] = self._events[self.pid], []
            dropped, self._dropped = self._dropped, 0
        if not events and not dropped:
            return None
        return TraceBatch(self.pid, self.process, tuple(self._threads[self.pid].items()), tuple(events),
                          dropped)

    def absorb(self, batch: TraceBatch | None, offset_ns: int = 0) -> None:
        """Another process's events (its clock `offset_ns` ahead of this one's), within the cap."""
        if batch is None:
            return
        with self._lock:
            self._names[batch.pid] = batch.process
            self._threads.setdefault(batch.pid, {}).update(batch.threads)
            room = max(0, self.max_events - self._kept)
            kept = batch.events[:room]
            lost = len(batch.events) - len(kept) + batch.dropped
            if lost:
                self._dropped += lost
                if self._capped_at is None:
                    self._capped_at = CLOCK()
            self._kept += len(kept)
            self._events.setdefault(batch.pid, []).extend(shifted(e, offset_ns) for e in kept)

    # -- output --------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The trace-event JSON object (what `write` writes)."""
        with self._lock:
            names = dict(self._names)
            threads = {p: dict(t) for p, t in self._threads.items()}
            events = {p: list(e) for p, e in self._events.items()}
            dropped, capped = self._dropped, self._capped_at
        out: list[dict[str, Any]] = []
        for i, pid in enumerate(sorted(names, key=lambda p: (p != self.pid, names[p]))):
            out += metadata(pid, names[pid], i, threads.get(pid, {}))
        note = None
        if dropped:
            note = (f"the trace reached its cap of {self.max_events} events; {dropped} later events "
                    f"were dropped (give a larger cap: --trace-max-events / Tracer(max_events=...))")
            out.append(chrome_event(Mark("trace cap reached: later events dropped", "trace",
                                         self.pid, capped or CLOCK(), {"dropped": dropped}),
                                    self.pid, self.origin_ns))
        for pid, evs in events.items():
            out += [chrome_event(e, pid, self.origin_ns) for e in evs]
        return {"traceEvents": out, "displayTimeUnit": "ms",
                "otherData": {"producer": "qnnrt", "clock": CLOCK_NOTE, "max_events": self.max_events,
                              "events": sum(len(e) for e in events.values()), "dropped_events": dropped,
                              "truncated": bool(dropped), "note": note,
                              "processes": {str(p): n for p, n in names.items()}}}

    def summary(self) -> dict[str, Any]:
        """Events kept per process track, dropped, and the file written (for a CLI's last line)."""
        with self._lock:
            return {"events": self._kept, "dropped": self._dropped, "max_events": self.max_events,
                    "processes": len(self._names), "path": self.written}

    def write(self, path: str | os.PathLike[str] | None = None) -> str:
        """Write the trace (to `path`, else the constructor's) atomically; returns the path."""
        target = os.fspath(path) if path is not None else self.path
        if target is None:
            raise QnnrtError("the trace has no path to be written to: give Tracer(path=...) or write(path)")
        full = check_output_path(target, "trace")
        write_atomic(full, json.dumps(self.to_json(), separators=(",", ":")) + "\n", "trace")
        self.written = full
        return full

    def close(self) -> None:
        """Write the trace to its path, once (nothing without a path)."""
        if self.path is not None and self.written is None:
            self.write()


class PoolTrace:
    """One pool's hooks into a tracer several pools (programs) share: a re-creation is one of a
    context this pool created before; live contexts and PD bytes stay the process's."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.created: set[str] = set()

    @property
    def dsp(self) -> None:
        return None

    def before_create(self, context: str) -> None:
        self.tracer.before_create(context)

    def after_create(self, context: str, ok: bool, pd_estimate_bytes: int | None = None) -> None:
        self.tracer.after_create(context, ok, pd_estimate_bytes, again=context in self.created)
        if ok:
            self.created.add(context)

    def before_free(self, context: str, evicted: bool = False) -> None:
        self.tracer.before_free(context, evicted)

    def after_free(self, context: str, evicted: bool = False) -> None:
        self.tracer.after_free(context, evicted)

    def mark(self, event: str, **info: Any) -> None:
        self.tracer.mark(event, **info)

    def record_dsp_events(self, context: str, events: list[dict[str, Any]]) -> int:
        return 0


def _scalar(v: Any) -> str | int | float | bool | None:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple, set, frozenset)):
        return ", ".join(map(str, v))
    return str(v)
