"""Plans: how a Program runs a method, built once at the method's first run.

A plan is a list of steps over a list of values indexed by slot (no names, no dicts per call):
- `GraphStep`: one QNN graph call through its `core.graph.GraphBinding` (the one binder; the graph
  call is one prebuilt C call). Tensors that never leave the method live in planned buffers bound
  once; method outputs are fresh arrays per run (an earlier result never changes);
- `OrtStep` (runtime/ort_step.py): an ONNX Runtime CPU segment on an IOBinding made once over
  planned buffers (portable to a PD worker when bound);
- `SegmentStep`: a run of steps another host (a PD worker) runs on one request (runtime/segments.py);
- the .pte layer brings its own steps (executorch/plan.py) and runs them the same way.
`LiveGraphs` points the graph steps at their live graphs: when every context the plan uses is live
and nothing is pending (one generation comparison) the steps run back to back, else each graph call
goes through the pool (acquire / release). Profiling and tracing attach to the binders
(`CallObservers`); they are not another path (a traced plan's CPU steps are wrapped in traced steps,
runtime/tracing.py). Every run records `timing`: its graph calls, and, when the program is timed
(`Program.timed`), the seconds in graphExecute and in CPU ops (two clock reads per graph call and
per CPU op, which an untimed plan does not make).

`ReferencePlan` (Program.compiled = False) runs a method step by step by tensor name through
`Graph.execute`: the oracle the tests compare plans with, bit for bit.

A `PreparedRun` (`Program.prepare`) is a method's plan bound once to arrays its caller owns
(`CallerArrays`): the graph calls read those inputs and write those outputs in place, so a run is
the steps alone (no inputs to check, no outputs to allocate): what a loop calling one method with
persistent state (an LLM's decode step over its KV caches) runs.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from qnnrt.core import Profile
from qnnrt.core.binding import GraphBinding, ProfileSink
from qnnrt.core.call import BoundCall
from qnnrt.core.tensor import order_inputs, prepare_input
from qnnrt.errors import QnnError, QnnrtError
from qnnrt.runtime.hooks import ExecutionRecorder, Tracing
from qnnrt.runtime.method_spec import CpuStep, Inputs, QnnStep
from qnnrt.runtime.ort_step import Kind, Shape, ort_step, static_shape
from qnnrt.runtime.segments import cut
from qnnrt.runtime.steps import (CPU, GRAPH, SEGMENT, Call, GraphStep, SegmentStep, Step,
                                 loop_call)
from qnnrt.runtime.tracing import traced_steps

if TYPE_CHECKING:
    from qnnrt.runtime.method import Method
    from qnnrt.runtime.plan_context import PlanContext
    from qnnrt.runtime.recovery import Recovery
    from qnnrt.runtime.residency import ContextSource, LiveContext

class RunTiming:
    """What the last run spent inside QNN graph execution and in CPU ops (seconds; 0.0 when the
    plan is not timed, `timed`), and its graph calls."""
    __slots__ = ("accelerator_s", "cpu_ops_s", "graph_calls", "timed")

    def __init__(self, timed: bool = False) -> None:
        self.accelerator_s = 0.0
        self.cpu_ops_s = 0.0
        self.graph_calls = 0
        self.timed = timed


class Plan(Protocol):
    """What a Program runs: built for one method, run with that method's inputs."""
    @property
    def method(self) -> Method: ...

    @property
    def timing(self) -> RunTiming: ...

    def run(self, inputs: Inputs) -> dict[str, np.ndarray]: ...


class NotPreparable(QnnrtError):
    """The method cannot be bound to caller arrays (not a straight-line method of static
    tensors): run it with `Program.run`."""


@dataclass(frozen=True)
class CallerArrays:
    """Arrays a caller owns for the life of a prepared run, by method input / output name: each
    graph input fed by a method input reads its array in place (bound once), each graph output that
    is a method output writes its array in place; an output a CPU step makes is copied into its
    array after the run. Under multi-PD they must come from `Program.buffer` (the shared arena), so
    the workers read and write them in place too."""
    inputs: Mapping[str, np.ndarray]
    outputs: Mapping[str, np.ndarray]


class PreparedRun(Protocol):
    """A method's plan bound to `CallerArrays` (built by `Method.prepare`)."""
    @property
    def timing(self) -> RunTiming: ...

    def run(self) -> None:
        """One run: reads the caller's input arrays, leaves the outputs in the caller's arrays."""
        ...

    def graph_reads(self, name: str) -> list[np.ndarray]:
        """The arrays the graph inputs fed by method input `name` are bound to (the caller's own
        array where it is read in place)."""
        ...


class CallObservers:
    """What watches a program's graph calls, attached to each binder (not another path): QNN
    execution profiling (one QNN profile whose events go to the program's ExecutionProfiler after
    every call) and the tracer (each call this process makes, as a slice; a PD worker traces the
    calls it makes itself)."""

    def __init__(self, profile: Profile | None, profiler: ExecutionRecorder | None,
                 tracer: Tracing | None, iteration: Callable[[], int]) -> None:
        self.profile, self.profiler, self.tracer = profile, profiler, tracer
        self._iteration = iteration
        self._attached: list[tuple[GraphBinding, ProfileSink]] = []

    def attach(self, step: GraphStep) -> None:
        key, graph, b = step.key, step.graph, step.binding
        profiler, tracer = self.profiler, self.tracer
        if self.profile is not None and profiler is not None:
            def sink(events: list[dict]) -> None:
                profiler.record("execute", graph, key, events, iteration=self._iteration())
            b.attach_profile(self.profile, sink)
            self._attached.append((b, sink))
        if tracer is not None and isinstance(b.call, BoundCall):
            b.observe(lambda end, seconds, events: tracer.graph_call(key, graph, end, seconds, events))

    def restart(self, profile: Profile) -> None:
        """The backend restarted (recovery) and closed the old profile: record into `profile`."""
        self.profile = profile
        for binding, sink in self._attached:
            binding.attach_profile(profile, sink)


def graph_step(context: PlanContext, step: QnnStep, position: int, in_slots: Sequence[int],
               out_slots: Sequence[int], where: str) -> GraphStep:
    """A graph step with its binder (defaults: inputs checked, outputs fresh), profiled when the
    program profiles, its calls timed when the plan is timed or traced (a trace's slices need
    their seconds; a PD worker times its own)."""
    spec = context.binaries[step.key].graph(step.graph)
    call = context.hosts.bound_call(step.key, spec)
    if isinstance(call, BoundCall):
        call.timed = context.timed or context.tracer is not None
    binding = GraphBinding(call, spec, in_slots, out_slots, step.dequantize, where,
                           shared=context.shared_memory)
    g = GraphStep(step.key, step.graph, position, binding)
    if context.observers is not None:
        context.observers.attach(g)
    return g


class LiveGraphs:
    """Keeps graph steps pointed at live graphs. `all_live()` is one generation comparison while
    nothing changed; otherwise the pool is asked, under its lock, for the contexts."""

    def __init__(self, pool: ContextSource, steps: list[GraphStep], recovery: Recovery,
                 order: list[str] | None = None) -> None:
        self.pool, self.steps, self.recovery = pool, steps, recovery
        # context keys in call order (for the policy): the steps', unless they repeat
        self.order = [s.key for s in steps] if order is None else order
        self.keys = sorted(set(self.order))
        self._generation: int | None = None
        self.pointed = 0   # how many times the steps were pointed at live contexts

    def all_live(self) -> bool:
        """True when every context is live and nothing pending; then every step points at it. The
        pool bumps its generation on every change to what is live (a creation, a free, a closed
        pool or worker), so an unchanged generation is the whole check."""
        if self._generation is not None and self.pool.generation == self._generation:
            return True
        live = self.pool.live_contexts(self.keys)
        if live is None:
            self._generation = None
            return False
        for s in self.steps:
            s.point_at(live.contexts[s.key])
        self._generation = live.generation
        self.pointed += 1
        return True

    def run_pooled(self, step: GraphStep, values: list, position: int | None = None) -> float:
        """One graph call with its context acquired from the pool (and released after);
        `position` in the call order, the step's own unless it is called at several."""
        pool = self.pool
        at = step.position if position is None else position
        ctx = pool.acquire(step.key, at)
        try:
            step.point_at(ctx)
            try:
                return step.run(values)
            except QnnError as e:
                return self.recover(step, values, e)
        finally:
            pool.release(step.key, at)

    def recover(self, step: GraphStep, values: list, error: QnnError) -> float:
        """`step`'s call failed with `error`: the program's recovery policy (runtime/recovery.py)
        re-creates what the error calls for, or raises, and the call runs again with the same
        inputs (outputs bound afresh by the binder); then every step is pointed at the re-created
        contexts, so the rest of a run goes on."""
        def again(context: LiveContext) -> float:
            step.point_at(context)
            return step.run(values)
        seconds = self.recovery.rerun(step.key, step.graph, error, again)
        self._generation = None
        self.all_live()   # re-points every step when all are live (the fast path's state)
        return seconds


class StepPlan:
    """Runs a list of steps over a slot list, graph calls through `LiveGraphs`."""
    timing: RunTiming

    def __init__(self, context: PlanContext, graph_steps: list[GraphStep]) -> None:
        self.context = context
        self.graph_steps = graph_steps
        self.live = LiveGraphs(context.pool, graph_steps, context.recovery)
        self.timing = RunTiming(context.timed)

    @property
    def steps(self) -> list[Step]:
        return self._steps

    @steps.setter
    def steps(self, steps: list[Step]) -> None:
        """The plan's steps; what the loop calls for each is worked out here, and again after the
        steps are pointed at live graphs (a binder may bind more at its first `point_at`)."""
        self._steps = steps
        self._calls_pointed = -1
        self.calls = self._loop_calls()

    def _loop_calls(self) -> list[Call]:
        timed = self.context.timed
        return [loop_call(s, timed) for s in self._steps]

    def cut_by_host(self, template: list, outputs: Sequence[int]) -> None:
        """Runs of steps whose graphs live in another host become one step each, which that host
        runs on one request (runtime/segments.py); `outputs`: the slots the plan returns."""
        context = self.context
        hosts = context.hosts
        self.steps = cut(self.steps, hosts.host_of, outputs,
                         lambda seg: hosts.segment_step(seg, template, context))
        if context.tracer is not None:   # each CPU step this process runs, a slice
            self.steps = traced_steps(self.steps, context.tracer)

    def run_steps(self, values: list) -> None:
        """Every step once, in order, over `values`; the graph calls back to back while every
        context is live, else each through the pool."""
        counters, live = self.context.counters, self.live
        if not live.all_live():
            self.context.pool.set_order(live.order)
            self._run_pooled(values)
            return
        if self._calls_pointed != live.pointed:   # pointed anew since the calls were worked out
            self.calls, self._calls_pointed = self._loop_calls(), live.pointed
        accelerator = cpu = 0.0
        for run, kind, step in self.calls:
            if kind == CPU:
                cpu += run(values)
            elif kind == GRAPH:
                counters.graph_calls += 1  # as they happen: progress lines read it
                try:
                    accelerator += run(values)
                except QnnError as e:
                    assert isinstance(step, GraphStep)
                    accelerator += live.recover(step, values, e)
            else:   # another host's steps, on one request
                assert isinstance(step, SegmentStep)
                accelerator += run(values)
                cpu += step.cpu_seconds   # its graph calls are counted there, as they happen
        t = self.timing
        t.accelerator_s, t.cpu_ops_s, t.graph_calls = accelerator, cpu, len(self.graph_steps)

    def _run_pooled(self, values: list) -> None:
        """The same steps with each graph call's context acquired from the pool and released
        after it (some context is not live, or something is pending)."""
        accelerator = cpu = 0.0
        counters, live = self.context.counters, self.live
        for run, kind, step in self.calls:
            if kind == GRAPH:
                assert isinstance(step, GraphStep)
                counters.graph_calls += 1
                accelerator += live.run_pooled(step, values)
            elif kind == SEGMENT:
                assert isinstance(step, SegmentStep)
                accelerator += run(values)
                cpu += step.cpu_seconds
            else:
                cpu += run(values)
        t = self.timing
        t.accelerator_s, t.cpu_ops_s, t.graph_calls = accelerator, cpu, len(self.graph_steps)


class MethodPlan(StepPlan):
    """A Method of QNN steps and ONNX Runtime CPU segments, compiled for one Program."""

    def __init__(self, context: PlanContext, method: Method, caller: CallerArrays | None = None) -> None:
        self.context = context   # before the steps: planned buffers come from it
        self.method = method
        self.where = f"method {method.name!r}"
        self.slots: dict[str, int] = {}
        self.kinds: dict[int, Kind] = {}
        self.planned: dict[int, np.ndarray] = {}
        self.in_specs = list(method.inputs)
        self.in_names = [s.name for s in method.inputs]
        self.in_slots = [self.slot(n) for n in self.in_names]
        for s, slot in zip(method.inputs, self.in_slots):
            if static_shape(s.shape):
                self.kinds[slot] = (np.dtype(s.dtype), tuple(s.shape))
        self.out_names = [o.name for o in method.outputs]
        self.out_slots = {self.slot(n) for n in self.out_names}
        in_set = set(self.in_slots)
        # (name, slot, copy: the output is a method input and must not alias the caller's array)
        self.out_list = [(n, self.slot(n), self.slot(n) in in_set) for n in self.out_names]
        constants = {self.slot(n): a for n, a in method.constants.items()}
        self.caller_outputs: dict[int, np.ndarray] = {}
        if caller is not None:
            self._take_caller(caller)
        self.steps = []
        graph_steps: list[GraphStep] = []
        for step in method.steps:
            if isinstance(step, QnnStep):
                g = self._graph_step(context, step, len(graph_steps))
                self.steps.append(g)
                graph_steps.append(g)
            elif isinstance(step, CpuStep):
                self.steps.append(ort_step(self, step.segment))
            else:
                raise QnnrtError(f"{self.where}: unknown step {type(step).__name__}")
        super().__init__(context, graph_steps)
        self.template: list = [None] * len(self.slots)
        for slot, b in self.planned.items():
            self.template[slot] = b
        for slot, a in constants.items():
            self.template[slot] = a
        self.cut_by_host(self.template, [slot for _, slot, _ in self.out_list])

    def _graph_step(self, context: PlanContext, step: QnnStep, position: int) -> GraphStep:
        """Inputs of a known kind are pointed (or bound once, when planned) without a check;
        outputs that never leave the method go to planned buffers."""
        where = f"graph {step.graph!r} of {self.where}"
        g = graph_step(context, step, position, [self.slot(n) for n in step.inputs],
                       [self.slot(n) for n in step.outputs], where)
        b = g.binding
        for i, (slot, s) in enumerate(zip(b.in_slots, b.spec.inputs)):
            if self.kinds.get(slot) == (s.dtype, tuple(s.shape)):
                fixed = self.planned.get(slot)
                if fixed is not None:
                    b.bind_input(i, fixed)
                else:
                    b.trust_input(i)
        for j, slot in enumerate(b.out_slots):
            dtype, shape = kind = b.output_kind(j)
            self.kinds[slot] = kind
            if slot not in self.out_slots:
                b.bind_output(j, self.plan_buffer(slot, shape, dtype))
            elif slot in self.caller_outputs:
                b.bind_output(j, self.caller_outputs[slot])
                self.planned[slot] = self.caller_outputs[slot]
        return g

    def _take_caller(self, caller: CallerArrays) -> None:
        """The caller's arrays as planned buffers of the method's input / output slots: bound into
        the graph calls once (a method output a graph does not write cannot be bound)."""
        ins = {s.name: s for s in self.method.inputs}
        outs = {s.name: s for s in self.method.outputs}
        for what, given, specs in (("input", caller.inputs, ins), ("output", caller.outputs, outs)):
            for name, x in given.items():
                spec = specs.get(name)
                if spec is None:
                    raise QnnrtError(f"{self.where} {what} {name!r}: no such tensor; the method has "
                                     f"{sorted(specs)}")
                if (not isinstance(x, np.ndarray) or x.dtype != np.dtype(spec.dtype)
                        or x.shape != tuple(spec.shape) or not x.flags.c_contiguous
                        or not x.flags.writeable):
                    got = f"{x.dtype}{list(x.shape)}" if isinstance(x, np.ndarray) else type(x).__name__
                    raise QnnrtError(f"{self.where} {what} {name!r}: the caller's array must be a "
                                     f"writeable C-contiguous {np.dtype(spec.dtype)}{list(spec.shape)}, "
                                     f"got {got}")
                if what == "input":
                    self.planned[self.slot(name)] = x
                else:
                    self.caller_outputs[self.slot(name)] = x

    # -- planning ---------------------------------------------------------------------------
    def slot(self, name: str) -> int:
        s = self.slots.get(name)
        if s is None:
            s = self.slots[name] = len(self.slots)
        return s

    def plan_buffer(self, slot: int, shape: Shape, dtype: np.dtype) -> np.ndarray:
        b = self.planned.get(slot)
        if b is None or b.shape != shape or b.dtype != dtype:
            b = self.planned[slot] = self.context.buffer(shape, dtype)
        return b

    # -- running ----------------------------------------------------------------------------
    def run(self, inputs: Inputs) -> dict[str, np.ndarray]:
        values = self.template.copy()
        for s, slot, x in zip(self.in_specs, self.in_slots,
                              order_inputs(self.in_names, inputs, self.where)):
            values[slot] = prepare_input(s, x, self.where)
        self.run_steps(values)
        return {n: (values[slot].copy() if copy else values[slot])
                for n, slot, copy in self.out_list}


class ReferencePlan:
    """The step-by-step path by tensor name (Method.run, each graph through Graph.execute): what
    the tests compare every plan with."""

    def __init__(self, context: PlanContext, method: Method) -> None:
        self.context, self.method = context, method
        self.timing = RunTiming()

    def run(self, inputs: Inputs) -> dict[str, np.ndarray]:
        self.timing = RunTiming()
        self.context.pool.set_order(self.method.graph_order)
        out = self.method.run(inputs, self._run_graph)
        self.timing.graph_calls = len(self.method.graph_order)
        return out

    def _run_graph(self, step: QnnStep, position: int,
                   arrays: list[np.ndarray]) -> list[np.ndarray]:
        context = self.context
        context.counters.graph_calls += 1  # read by progress reporters on other threads
        ctx = context.pool.acquire(step.key, position)
        try:
            try:
                return self._execute(ctx, step, arrays)
            except QnnError as e:
                return context.recovery.rerun(step.key, step.graph, e,
                                              lambda c: self._execute(c, step, arrays))
        finally:
            context.pool.release(step.key, position)

    def _execute(self, ctx: LiveContext, step: QnnStep,
                 arrays: list[np.ndarray]) -> list[np.ndarray]:
        """`ctx`: a live Context, or a PD worker's (hosts/pd/remote.py RemoteContext): both give graphs of
        one protocol (`core.graph.LiveGraph`), executed by name, checked."""
        g = ctx.graph(step.graph)
        out = g.execute(arrays, dequantize=step.dequantize, shared=self.context.shared_memory)
        self.timing.accelerator_s += g.last_execute_seconds
        return [out[s.name] for s in g.spec.outputs]

