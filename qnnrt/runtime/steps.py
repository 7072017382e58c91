"""The steps a plan is made of (runtime/plan.py) and how its loop calls them.

A `GraphStep` is one graph call through its binder; a `SegmentStep` is a run of steps another host
(a PD worker) runs on one request; any other step runs on the CPU (an ONNX Runtime segment, the
.pte layer's kernels, matmuls, moves and frees). What the loop calls for each step, and which of
its accumulators the seconds go to, is decided once per plan (`loop_call`), not per call.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from qnnrt.core.binding import GraphBinding

if TYPE_CHECKING:
    from qnnrt.runtime.residency import LiveContext

_clock = time.perf_counter


class Step(Protocol):
    """One operation of a plan over the slot list. A `GraphStep` is a graph call on the
    accelerator and returns the seconds inside it (when timed); every other step runs on the CPU
    and returns 0.0 (a timed plan times it: `TimedStep`)."""

    def run(self, values: list) -> float: ...


class Bookkeeping:
    """A step that only moves values between slots (a .pte move, free or output conversion): no
    op, so a timed plan does not time it (its cost is the runtime's own)."""


class TimedStep:
    """A CPU op of a timed plan: the seconds its run takes."""
    __slots__ = ("step",)

    def __init__(self, step: Step) -> None:
        self.step = step

    def run(self, values: list) -> float:
        t0 = _clock()
        self.step.run(values)
        return _clock() - t0


class SegmentStep:
    """A run of steps executed by another host on one request. `run` returns the seconds inside
    graphExecute; `cpu_seconds` is what the last run spent in its CPU steps; `graph_calls` how many
    graph calls one run makes (the plan counts them for progress)."""
    graph_calls: int = 0
    cpu_seconds: float = 0.0

    def run(self, values: list) -> float:
        raise NotImplementedError


class GraphStep:
    """One graph call of a plan: context `key`, graph `graph`, the `position`-th graph call of the
    method (the residency policy plans by it), and the binder that makes the call. Its run is the
    binder's (a plan's loop calls the binder's `entry` itself)."""
    __slots__ = ("key", "graph", "position", "binding")

    def __init__(self, key: str, graph: str, position: int, binding: GraphBinding) -> None:
        self.key, self.graph, self.position, self.binding = key, graph, position, binding

    def point_at(self, context: LiveContext) -> None:
        """Call the graph of this (live, possibly re-created) context from now on."""
        self.binding.point_at(context.graph(self.graph))

    @property
    def reads(self) -> list[int]:
        return self.binding.in_slots

    @property
    def writes(self) -> list[int]:
        return self.binding.out_slots

    def run(self, values: list) -> float:
        return self.binding.run(values)


# what the loop does with a step's seconds (`StepPlan.calls`)
CPU, GRAPH, SEGMENT = 0, 1, 2
# one step as the loop calls it: its run (a graph step's: its binder's entry), its kind, the step
Call = tuple[Callable[[list], float], int, Step]


def loop_call(step: Step, timed: bool) -> Call:
    """How the plan's loop calls `step` (decided when the plan's steps are set and after they are
    pointed at live graphs, not per call): a graph step through its binder's entry, a CPU op of a
    timed plan through a `TimedStep`."""
    if isinstance(step, GraphStep):
        return step.binding.entry, GRAPH, step
    if isinstance(step, SegmentStep):
        return step.run, SEGMENT, step
    if timed and not isinstance(step, Bookkeeping):
        return TimedStep(step).run, CPU, step
    return step.run, CPU, step
