"""A traced plan's CPU steps: each one this process runs wrapped in a timed step that records a slice
(the graph calls are observed at their binders, a PD worker's part by the worker). Built only when
the program traces: an untraced plan's steps are the plain ones, so tracing off costs nothing."""
from __future__ import annotations

from collections.abc import Sequence

from qnnrt.runtime.hooks import Tracing
from qnnrt.runtime.steps import GraphStep, SegmentStep, Step


class TracedStep:
    """A CPU step whose runs are slices named `label`."""
    __slots__ = ("step", "label", "tracer")

    def __init__(self, step: Step, label: str, tracer: Tracing) -> None:
        self.step, self.label, self.tracer = step, label, tracer

    def run(self, values: list) -> float:
        tracer = self.tracer
        t0 = tracer.now()
        seconds = self.step.run(values)
        tracer.span(self.label, "cpu", t0)
        return seconds


def step_label(step: object) -> str | None:
    """What a trace calls a CPU step: its `label` (an ONNX Runtime segment, a .pte kernel); None for
    bookkeeping (a .pte move or free), which is not traced."""
    label = getattr(step, "label", None)
    return label if isinstance(label, str) else None


def traced_steps(steps: Sequence[Step], tracer: Tracing) -> list[Step]:
    """`steps` with each labelled CPU step timed (graph steps and other hosts' segments as they
    are: observed elsewhere)."""
    out: list[Step] = []
    for s in steps:
        label = None if isinstance(s, (GraphStep, SegmentStep)) else step_label(s)
        out.append(s if label is None else TracedStep(s, label, tracer))
    return out
