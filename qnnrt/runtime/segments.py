"""A plan cut where its steps change host: the runs of steps whose graphs live in another host (a PD
worker) become one segment step each, which that host runs on one request.

Hosts are numbers from the pool (`host_of(key)`: 0 is this process). A graph step belongs to its
context's host; a CPU step that says which slots it reads and writes (`reads` / `writes`) goes with
the graph steps around it when they share a host; any other step (an ONNX Runtime segment that is
not bound, or too heavy to send) stays in this process. A segment starts at its first graph step
and ends at its last, so the CPU steps before and after it run here. What a segment needs from
before it (live-in slots) and what the rest of the plan needs from it (live-out slots) is worked
out once, here.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from qnnrt.runtime.steps import GraphStep, SegmentStep, Step


@runtime_checkable
class PortableStep(Protocol):
    """A step another host can run: the slots it reads and the slots it writes."""
    @property
    def reads(self) -> list[int]: ...

    @property
    def writes(self) -> list[int]: ...

    def run(self, values: list) -> float: ...


@dataclass(frozen=True)
class Segment:
    """Steps [start, stop) of a plan, all run by `host`."""
    host: int
    start: int
    stop: int
    steps: tuple[Step, ...]
    live_in: tuple[int, ...]      # slots read before the segment writes them
    live_out: tuple[int, ...]     # slots written here that later steps or the outputs read
    slots: frozenset[int]         # every slot its steps read or write


def _host(step: Step, host_of: Callable[[str], int]) -> int | None:
    """The host a step must run on; None for a portable CPU step (it runs where its neighbours do)."""
    if isinstance(step, GraphStep):
        return host_of(step.key)
    return None if isinstance(step, PortableStep) else 0


def find_segments(steps: Sequence[Step], host_of: Callable[[str], int],
                  outputs: Sequence[int]) -> list[Segment]:
    """The maximal runs of steps on a host other than 0, each from its first graph step to its
    last, with their live-in and live-out slots (`outputs`: the slots the plan returns)."""
    hosts = [_host(s, host_of) for s in steps]
    runs: list[tuple[int, int, int]] = []   # (host, start, stop)
    i = 0
    while i < len(steps):
        h = hosts[i]
        if not h:   # this process's, or a portable CPU step outside a segment
            i += 1
            continue
        last = i
        j = i + 1
        while j < len(steps) and hosts[j] in (h, None):
            if hosts[j] == h:
                last = j
            j += 1
        runs.append((h, i, last + 1))
        i = last + 1
    return [_segment(steps, h, a, b, outputs) for h, a, b in runs]


def _segment(steps: Sequence[Step], host: int, start: int, stop: int,
             outputs: Sequence[int]) -> Segment:
    written: set[int] = set()
    read: set[int] = set()
    live_in: list[int] = []
    for step in steps[start:stop]:
        assert isinstance(step, PortableStep)
        for slot in step.reads:
            if slot not in written and slot not in live_in:
                live_in.append(slot)
        read.update(step.reads)
        written.update(step.writes)
    later: set[int] = set(outputs)
    for step in steps[stop:]:
        later.update(step.reads if isinstance(step, PortableStep) else written)  # unknown: all
    return Segment(host, start, stop, tuple(steps[start:stop]), tuple(live_in),
                   tuple(sorted(s for s in written if s in later)), frozenset(read | written))


def cut(steps: list[Step], host_of: Callable[[str], int], outputs: Sequence[int],
        make: Callable[[Segment], SegmentStep]) -> list[Step]:
    """`steps` with each segment replaced by the step `make` builds for it."""
    segments = find_segments(steps, host_of, outputs)
    if not segments:
        return steps
    out: list[Step] = []
    at = 0
    for seg in segments:
        out += steps[at:seg.start]
        out.append(make(seg))
        at = seg.stop
    return out + steps[at:]
