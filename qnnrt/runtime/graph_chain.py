"""A method that is a chain of QNN graphs wired by tensor name, possibly across several context
binaries: the parts of a split model (a Genie bundle's ``prompt_ar128_cl4096_1_of_4`` ..
``4_of_4``). A graph input is the output of the latest earlier graph of that name, else a method
input; a graph output no later graph reads is a method output. Outputs stay as the graphs write
them (fixed-point tensors raw, their quantization on the IOSpec), so a caller keeping state in a
quantized dtype (an LLM's 8-bit KV cache) never round-trips it through float."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from qnnrt.core.binary import GraphSpec
from qnnrt.core.tensor import TensorSpec
from qnnrt.errors import FormatError
from qnnrt.runtime.method import Method
from qnnrt.runtime.method_spec import IOSpec, QnnStep
from qnnrt.runtime.plan import CallerArrays, MethodPlan, NotPreparable, Plan, RunTiming

if TYPE_CHECKING:
    from qnnrt.runtime.plan_context import PlanContext


@dataclass(frozen=True)
class GraphRef:
    """One graph of the chain: the pool key of its context binary and its spec."""
    key: str
    spec: GraphSpec


def _io(t: TensorSpec) -> IOSpec:
    return IOSpec(t.name, tuple(t.shape), t.dtype, t)


class GraphChainMethod(Method):
    """The graphs `refs` called in order, wired by tensor name (module docstring)."""

    def __init__(self, name: str, refs: Sequence[GraphRef]) -> None:
        if not refs:
            raise FormatError(f"method {name!r}: no graphs to call")
        self.name = name
        produced: dict[str, TensorSpec] = {}
        inputs: dict[str, TensorSpec] = {}
        read_later: dict[str, int] = {}
        for i, ref in enumerate(refs):
            for t in ref.spec.inputs:
                read_later[t.name] = i
                src = produced.get(t.name) or inputs.get(t.name)
                if src is None:
                    inputs[t.name] = t
                elif (src.dtype, tuple(src.shape)) != (t.dtype, tuple(t.shape)):
                    raise FormatError(
                        f"method {name!r}: graph {ref.spec.name!r} ({ref.key}) reads {t.name!r} as "
                        f"{t.dtype}{list(t.shape)}, but it is {src.dtype}{list(src.shape)} where it "
                        f"comes from; the parts do not fit together (rebuild them from one model)")
            for t in ref.spec.outputs:
                produced[t.name] = t
        self.refs = tuple(refs)
        self.inputs = [_io(t) for t in inputs.values()]
        self.steps = [QnnStep(r.key, r.spec.name, [t.name for t in r.spec.inputs],
                              [t.name for t in r.spec.outputs], False) for r in refs]
        outs: dict[str, TensorSpec] = {}
        for i, ref in enumerate(refs):
            for t in ref.spec.outputs:
                if read_later.get(t.name, -1) <= i:
                    outs[t.name] = t
                else:
                    outs.pop(t.name, None)
        self.outputs = [_io(t) for t in outs.values()]
        self._plan_lifetimes()

    def plan(self, context: PlanContext) -> Plan:
        return MethodPlan(context, self)

    def prepare(self, context: PlanContext, arrays: CallerArrays) -> PreparedPlan:
        """Every graph input fed by a method input reads the caller's array in place and every
        method output is written into the caller's array (`PreparedPlan`)."""
        return PreparedPlan(context, self, arrays)


class PreparedPlan:
    """A method of graph calls bound once to caller arrays (`PreparedRun`): a run is the plan's
    steps over its template, the caller's arrays already bound into the calls."""

    def __init__(self, context: PlanContext, method: Method, arrays: CallerArrays) -> None:
        self.plan = MethodPlan(context, method, arrays)
        if any(not isinstance(s, QnnStep) for s in method.steps):
            raise NotPreparable(f"method {method.name!r} has CPU segments: run it with Program.run")
        unbound = [n for n, slot, _ in self.plan.out_list
                   if n in arrays.outputs and slot not in self.plan.planned]
        if unbound:
            raise NotPreparable(f"method {method.name!r}: output(s) {unbound[:3]} are not written by "
                                f"a graph call and cannot be bound")
        self.arrays = arrays

    @property
    def timing(self) -> RunTiming:
        return self.plan.timing

    def run(self) -> None:
        self.plan.run_steps(self.plan.template.copy())

    def graph_reads(self, name: str) -> list[np.ndarray]:
        x = self.arrays.inputs.get(name)
        return [] if x is None else [x]
