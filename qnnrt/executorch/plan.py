""".pte methods as plans: `PtePlan`, a straight-line method of static tensors as named steps over a
slot list (lowered by lowering.py), `PreparedPte` (that plan bound once to a caller's arrays) and
`InterpretedPlan` (jumps, dynamic shapes or mutable state: the interpreter, with each delegate
through a prepared graph step). `pte_plan` picks one."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from qnnrt.errors import QnnError
from qnnrt.executorch.delegates import DelegateSite
from qnnrt.runtime.method_spec import Inputs, QnnStep, validate_inputs
from qnnrt.runtime.plan import (CallerArrays, LiveGraphs, NotPreparable, Plan, RunTiming, StepPlan,
                                graph_step)
from qnnrt.runtime.steps import GraphStep, Step
from qnnrt.executorch.lowering import Lowering, NotCompilable
from qnnrt.executorch.steps import FreeStep, adapt_delegate_inputs

if TYPE_CHECKING:
    from qnnrt.executorch.program import PteMethodAdapter
    from qnnrt.runtime.plan_context import PlanContext


class PtePlan(StepPlan):
    """A straight-line .pte method of static tensors as named steps over a slot list; with
    `caller` arrays, bound to them (what `PreparedPte` runs)."""

    def __init__(self, context: PlanContext, method: PteMethodAdapter,
                 caller: CallerArrays | None = None) -> None:
        lowering = Lowering(context, method)
        lowering.lower()
        lowering.plan_buffers()
        self.copies = lowering.bind_caller(caller) if caller is not None else []
        # the ports reading each slot (graph_reads says what a caller's input is bound to)
        self.readers = {i: [p for p in ports if p is not None]
                        for i, ports in lowering.readers.items()}
        super().__init__(context, lowering.graph_steps)
        a = lowering.analysis
        self.method = method
        self.where = lowering.where
        self.steps = needed_frees(lowering.steps, lowering.template, a.output_values)
        self.template = lowering.template
        self.in_specs = list(method.inputs)
        self.in_values = list(a.input_values)
        keep = a.constant_values | set(a.input_values)
        # (name, value, copy: the output is the program's or the caller's memory)
        self.outputs = [(s.name, i, i in keep) for s, i in zip(method.outputs, a.output_values)]
        self.cut_by_host(self.template, list(a.output_values))

    def run(self, inputs: Inputs) -> dict[str, np.ndarray]:
        given = validate_inputs(self.in_specs, inputs, self.where)
        values = self.template.copy()
        arrays = []
        for i, s in zip(self.in_values, self.in_specs):
            values[i] = x = given[s.name]
            arrays.append(x)
        self.run_steps(values)
        out = {}
        for name, i, copy in self.outputs:
            x = values[i]
            if isinstance(x, np.ndarray) and (copy or not x.flags.writeable
                                              or any(np.may_share_memory(x, g) for g in arrays)):
                x = np.array(x, copy=True)
            out[name] = x
        return out


def needed_frees(steps: list[Step], template: list, outputs: Sequence[int]) -> list[Step]:
    """`steps` without the frees that free nothing: of a slot the template holds and no step
    writes (a caller's array, a planned buffer, a constant: the plan keeps it), and those after
    the last other step (the run's slot list is dropped once the outputs are read). An LLM's
    prepared decode step had 62 such frees beside its one graph call (bench/RESULTS.md, issue 49)."""
    writes = [getattr(st, "writes", None) for st in steps if not isinstance(st, FreeStep)]
    written = None if None in writes else {x for w in writes if w is not None for x in w}
    kept = [st for st in steps if not (isinstance(st, FreeStep) and written is not None
                                       and template[st.slot] is not None and st.slot not in written)]
    out = set(outputs)
    end = len(kept)
    while end:
        last = kept[end - 1]
        if not isinstance(last, FreeStep) or last.slot in out:
            break
        end -= 1
    return kept[:end]


class PreparedPte:
    """A .pte method bound once to caller arrays (runtime/plan.py `PreparedRun`): a run is the
    plan's steps over its template (the caller's arrays already in their slots, bound into the
    graph calls), then the outputs CPU steps made copied into the caller's arrays."""

    def __init__(self, context: PlanContext, method: PteMethodAdapter, arrays: CallerArrays) -> None:
        try:
            self.plan = PtePlan(context, method, arrays)
        except NotCompilable:
            raise NotPreparable(f"method {method.name!r} is not straight-line with static tensors: "
                                f"it cannot be bound to caller arrays (run it with Program.run)"
                                ) from None
        self.inputs = {s.name: i for s, i in zip(method.inputs, self.plan.in_values)}

    @property
    def timing(self) -> RunTiming:
        return self.plan.timing

    def run(self) -> None:
        plan = self.plan
        values = plan.template.copy()
        plan.run_steps(values)
        for slot, target in plan.copies:
            np.copyto(target, values[slot])

    def graph_reads(self, name: str) -> list[np.ndarray]:
        slot = self.inputs[name]
        out = []
        for port in self.plan.readers.get(slot, []):
            if isinstance(port.step, GraphStep):
                b = port.step.binding.bound_input(port.index)
                if b is not None:
                    out.append(b)
        return out


class InterpretedPlan:
    """A .pte method the planner does not compile: the interpreter runs it, each delegate call
    through a prepared graph step (one per delegate)."""

    def __init__(self, context: PlanContext, method: PteMethodAdapter) -> None:
        self.context, self.method = context, method
        self.by_step: dict[int, GraphStep] = {}
        graph_steps: list[GraphStep] = []
        for site in method.delegates.values():
            g = self._delegate_step(context, site, len(graph_steps))
            self.by_step[id(site.step)] = g
            graph_steps.append(g)
        self.live = LiveGraphs(context.pool, graph_steps, context.recovery, order=method.graph_order)
        self.timing = RunTiming(context.timed)
        self._accelerator = 0.0
        self._all_live = False

    @staticmethod
    def _delegate_step(context: PlanContext, site: DelegateSite, position: int) -> GraphStep:
        ni, no = len(site.step.inputs), len(site.step.outputs)
        g = graph_step(context, site.step, position, range(ni), range(ni, ni + no),
                       f"graph {site.step.graph!r}")
        adapt_delegate_inputs(g)
        return g

    def _run_graph(self, step: QnnStep, position: int,
                   arrays: list[np.ndarray]) -> list[np.ndarray]:
        g = self.by_step[id(step)]
        values: list = list(arrays) + [None] * len(step.outputs)
        self.context.counters.graph_calls += 1  # as they happen: progress lines read it
        if self._all_live:
            try:
                self._accelerator += g.run(values)
            except QnnError as e:
                self._accelerator += self.live.recover(g, values, e)
        else:
            self._accelerator += self.live.run_pooled(g, values, position)
        return values[len(arrays):]

    def run(self, inputs: Inputs) -> dict[str, np.ndarray]:
        runner = self.method.runner
        self._accelerator = 0.0
        runner.kernel_seconds = 0.0
        self._all_live = self.live.all_live()
        if not self._all_live:
            self.context.pool.set_order(self.live.order)
        out = self.method.run(inputs, self._run_graph)
        t = self.timing
        t.accelerator_s, t.cpu_ops_s, t.graph_calls = (self._accelerator, runner.kernel_seconds,
                                                       len(self.live.order))
        return out


def pte_plan(context: PlanContext, method: PteMethodAdapter) -> Plan:
    """The compiled plan when the method is straight-line and static, else the interpreted one."""
    try:
        return PtePlan(context, method)
    except NotCompilable:
        return InterpretedPlan(context, method)
