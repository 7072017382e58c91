"""The events of a run's trace, as plain typed data: what a `Tracer` keeps and what a PD worker sends
back with its replies (`TraceBatch`), and how they become Chrome trace-event JSON (what Perfetto UI
and chrome://tracing open).

Times are nanoseconds of `core.clock.CLOCK`, the one clock every process of a run reads (system-wide:
a worker's timestamps line up with the main process's; one whose clock is off all the same is
corrected by the offset measured at its start)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from qnnrt.core.clock import CLOCK, CLOCK_NOTE

__all__ = ["CLOCK", "CLOCK_NOTE", "Span", "Sample", "Mark", "TraceEvent", "TraceBatch", "TraceArgs",
           "shifted", "chrome_event", "metadata"]

Scalar = str | int | float | bool | None
TraceArgs = dict[str, Scalar]          # a slice's or an instant's arguments (shown in the UI)


# Immutable typed records; NamedTuples rather than frozen dataclasses because a traced run makes one
# per graph call and a frozen dataclass costs ~5x as much to construct (bench/RESULTS.md, "Tracing").
class Span(NamedTuple):
    """A slice on thread `tid`: from `start_ns` to `end_ns`."""
    name: str
    cat: str
    tid: int
    start_ns: int
    end_ns: int
    args: TraceArgs | None = None


class Sample(NamedTuple):
    """The value(s) of the counter track `name` from `at_ns` on."""
    name: str
    at_ns: int
    values: dict[str, int | float]


class Mark(NamedTuple):
    """An instant on thread `tid` (a residency decision, the cap reached)."""
    name: str
    cat: str
    tid: int
    at_ns: int
    args: TraceArgs | None = None


TraceEvent = Span | Sample | Mark


@dataclass(frozen=True)
class TraceBatch:
    """A process's events since its last batch (a PD worker's, sent with a reply): its pid, the name
    of its track and threads, and how many events it dropped at its cap."""
    pid: int
    process: str
    threads: tuple[tuple[int, str], ...]
    events: tuple[TraceEvent, ...]
    dropped: int = 0


def shifted(event: TraceEvent, offset_ns: int) -> TraceEvent:
    """`event` on this process's clock, from one whose clock is `offset_ns` ahead."""
    if not offset_ns:
        return event
    if isinstance(event, Span):
        return Span(event.name, event.cat, event.tid, event.start_ns - offset_ns,
                    event.end_ns - offset_ns, event.args)
    if isinstance(event, Sample):
        return Sample(event.name, event.at_ns - offset_ns, event.values)
    return Mark(event.name, event.cat, event.tid, event.at_ns - offset_ns, event.args)


def _us(ns: int, origin: int) -> float:
    return round((ns - origin) / 1000.0, 3)


def chrome_event(event: TraceEvent, pid: int, origin_ns: int) -> dict[str, Any]:
    """One trace-event JSON object (ts and dur in microseconds since `origin_ns`)."""
    if isinstance(event, Span):
        d: dict[str, Any] = {"name": event.name, "cat": event.cat, "ph": "X", "pid": pid,
                             "tid": event.tid, "ts": _us(event.start_ns, origin_ns),
                             "dur": round(max(0, event.end_ns - event.start_ns) / 1000.0, 3)}
    elif isinstance(event, Sample):
        return {"name": event.name, "ph": "C", "pid": pid, "ts": _us(event.at_ns, origin_ns),
                "args": dict(event.values)}
    else:
        d = {"name": event.name, "cat": event.cat, "ph": "i", "s": "t", "pid": pid, "tid": event.tid,
             "ts": _us(event.at_ns, origin_ns)}
    if event.args:
        d["args"] = dict(event.args)
    return d


def metadata(pid: int, process: str, sort_index: int, threads: dict[int, str]) -> list[dict[str, Any]]:
    """The name and order of a process's track and the names of its threads."""
    out: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": process}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": sort_index}}]
    for tid, name in sorted(threads.items()):
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
    return out
