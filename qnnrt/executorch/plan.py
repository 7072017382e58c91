""".pte methods as plans (runtime/plan.py runs them): a straight-line method of static tensors
becomes named steps over a slot list, one per instruction:

- `KernelStep`  a CPU kernel (numpy) on slot arguments, its result in its out slots;
- `MatmulStep`  `aten::mm.out` by a constant float32 weight, as a.dot(W, out=...) into a
                planned buffer when the result never leaves the method;
- a QNN delegate: a runtime GraphStep (the one binder), then a `ConvertStep` when the graph's
                outputs are not what the program declares (dtype cast, reshape);
- `MoveStep`, `FreeStep`  ExecuTorch's MoveCall / FreeCall (and frees after last use).

Arguments are `Slot` (a value made at run time) or `Const` (a program-given value, put in a slot of
its own at plan time), so a step reads only `values[slot]`. Values made by one bindable producer and
read only by bindable consumers of the same dtype and shape live in planned buffers bound into the
graph calls once. Other methods (jumps, dynamic shapes, mutable state) run on `InterpretedPlan`: the
interpreter, with each delegate through a prepared graph step. The planner reads the interpreter's
load-time `MethodAnalysis`, nothing private.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from qnnrt.core.tensor import prepare_input
from qnnrt.errors import QnnError, QnnrtError
from qnnrt.executorch import kernels as K
from qnnrt.executorch.instructions import InstructionVisitor, visit
from qnnrt.executorch.interpreter import UNDEFINED, MethodAnalysis, shape_fits
from qnnrt.executorch.kernels.dtypes import astype
from qnnrt.executorch.program import DelegateSite, PteMethodAdapter, size1_reshape
from qnnrt.executorch.reader import (DelegateCall, FreeCall, JumpFalseCall, KernelCall, MoveCall,
                                     TensorInfo)
from qnnrt.runtime.method import QnnStep, validate_inputs
from qnnrt.runtime.plan import (CallerArrays, GraphStep, Inputs, LiveGraphs, NotPreparable, Plan,
                                RunTiming, Step, StepPlan, graph_step)
from qnnrt.runtime.steps import Bookkeeping

from qnnrt.core.tensor import TensorSpec

if TYPE_CHECKING:
    from qnnrt.core.binary import GraphSpec
    from qnnrt.runtime.plan_context import PlanContext

Kind = tuple[np.dtype, tuple[int, ...]]   # what a buffer holds: dtype and shape
_F32 = np.dtype(np.float32)


class NotCompilable(Exception):
    """The method is not straight-line and static: it runs on InterpretedPlan."""


@dataclass(frozen=True)
class Slot:
    """An argument made at run time: the value in this slot."""
    index: int


@dataclass(frozen=True)
class Const:
    """An argument the program gives (a scalar, a list, a constant tensor)."""
    value: object


Arg = Slot | Const


# ------------------------------------------------------------------------------------- the steps
class KernelStep:
    """A CPU kernel: result = kernel(*values[inputs]), cast to the out tensor, in every out slot."""
    __slots__ = ("fn", "inputs", "outs", "info", "tensor", "name", "cast", "where")

    def __init__(self, kernel: K.KernelDef, inputs: list[int], outs: list[int], tensor: TensorInfo,
                 where: str) -> None:
        self.fn, self.name, self.cast = kernel.fn, kernel.name, kernel.cast
        self.inputs, self.outs, self.tensor, self.where = inputs, outs, tensor, where
        self.info = K.OutInfo(tensor.dtype, tensor.shape)

    @property
    def reads(self) -> list[int]:
        return self.inputs

    @property
    def writes(self) -> list[int]:
        return self.outs

    @property
    def label(self) -> str:
        """What a trace calls it: the operator."""
        return self.name

    def run(self, values: list) -> float:
        xs = [values[i] for i in self.inputs]
        try:
            res = K.cast_to_out(self.fn(*xs, out=self.info), self.info, self.name, self.cast)
        except K.KernelError as e:
            raise K.KernelError(f"{self.where}: {e}") from None
        except QnnrtError:
            raise
        except Exception as e:  # noqa: BLE001 - as the interpreter: bad arguments
            raise K.KernelError(f"{self.where}: the program gives this operator arguments it "
                                f"cannot take ({type(e).__name__}: {e})") from None
        if not shape_fits(res.shape, self.tensor):
            raise QnnrtError(f"{self.where}: the result has shape {list(res.shape)} but the "
                             f"program's out tensor is {list(self.tensor.shape)}")
        for o in self.outs:
            values[o] = res
        return 0.0


class MatmulStep:
    """aten::mm.out by a constant float32 weight: values[a].dot(weight, out=result), the result a
    planned buffer (`result`) when it never leaves the method, else a fresh array. For 2-d float32
    arrays ndarray.dot makes the BLAS call np.matmul makes (gemv / gemm with the same arguments,
    so the same bits: tests/executorch/test_plan.py), without a generalized ufunc's set-up per
    call (a third of the cost of np.matmul here)."""
    __slots__ = ("a", "weight", "out", "shape", "result")

    def __init__(self, a: int, weight: np.ndarray, out: int, shape: tuple[int, ...]) -> None:
        self.a, self.weight, self.out, self.shape = a, weight, out, shape
        self.result: np.ndarray | None = None

    @property
    def reads(self) -> list[int]:
        return [self.a]

    @property
    def writes(self) -> list[int]:
        return [self.out]

    @property
    def label(self) -> str:
        return "aten::mm.out"

    def run(self, values: list) -> float:
        res = self.result
        if res is None:
            res = np.empty(self.shape, np.float32)
        values[self.a].dot(self.weight, res)   # (b, out): positional, parsed fastest
        values[self.out] = res
        return 0.0


@dataclass(frozen=True)
class OutputConversion:
    """A graph output whose dtype or shape is not the one the program declares for its value."""
    slot: int
    output: int            # the graph's output position
    tensor: TensorInfo     # what the program declares


class ConvertStep(Bookkeeping):
    """After a delegate call, the outputs the program declares otherwise converted (dtype cast,
    reshape of the same size), in their slots."""
    __slots__ = ("graph", "conversions", "where")

    def __init__(self, graph: str, conversions: list[OutputConversion], where: str) -> None:
        self.graph, self.conversions, self.where = graph, conversions, where

    @property
    def reads(self) -> list[int]:
        return [c.slot for c in self.conversions]

    @property
    def writes(self) -> list[int]:
        return [c.slot for c in self.conversions]

    def run(self, values: list) -> float:
        for c in self.conversions:
            a, t = values[c.slot], c.tensor
            if t.dtype is not None and a.dtype != t.dtype:
                a = astype(a, t.dtype)
            if a.shape != tuple(t.shape):
                if a.size != t.numel:
                    raise QnnrtError(f"{self.where}: output {c.output} of graph {self.graph!r} has "
                                     f"shape {list(a.shape)}, the program expects {list(t.shape)}")
                a = a.reshape(t.shape)
            values[c.slot] = a
        return 0.0


class MoveStep(Bookkeeping):
    """ExecuTorch's MoveCall: the value in `source` is also the value in `target`."""
    __slots__ = ("source", "target")

    def __init__(self, source: int, target: int) -> None:
        self.source, self.target = source, target

    @property
    def reads(self) -> list[int]:
        return [self.source]

    @property
    def writes(self) -> list[int]:
        return [self.target]

    def run(self, values: list) -> float:
        values[self.target] = values[self.source]
        return 0.0


class FreeStep(Bookkeeping):
    """ExecuTorch's FreeCall, or a value dead after its last use: the slot lets go of it."""
    __slots__ = ("slot",)

    def __init__(self, slot: int) -> None:
        self.slot = slot

    @property
    def reads(self) -> list[int]:
        return []

    @property
    def writes(self) -> list[int]:
        return [self.slot]

    def run(self, values: list) -> float:
        values[self.slot] = None
        return 0.0


@dataclass(frozen=True)
class Size1Input:
    """A delegate input that is not already right: size-1 dims reshaped as ExecuTorch accepts, then
    checked and converted like any graph input (a value: a PD worker may run the delegate)."""
    spec: TensorSpec
    where: str

    def __call__(self, a: np.ndarray) -> np.ndarray:
        return prepare_input(self.spec, size1_reshape(a, tuple(self.spec.shape)), self.where)


def _adapt_delegate_inputs(step: GraphStep) -> None:
    b = step.binding
    for i, s in enumerate(b.spec.inputs):
        b.adapt_input(i, Size1Input(s, b.where))


# ---------------------------------------------------------------------------- compiling a method
@dataclass(frozen=True)
class Port:
    """A place a planned buffer can be bound once: a delegate step's graph input / output, a matmul
    step's left operand / result. `None` in a port list: a user that takes whatever it is given."""
    step: GraphStep | MatmulStep
    index: int          # graph input / output position (0 for a matmul)
    kind: Kind


class _Lowering(InstructionVisitor[None]):
    """Turns a method's instructions into steps (one handler per instruction kind), then plans
    buffers for the values that can live in one."""

    def __init__(self, context: PlanContext, method: PteMethodAdapter) -> None:
        a: MethodAnalysis = method.runner.analysis
        if a.has_mutable_state:
            raise NotCompilable
        self.context, self.method, self.analysis = context, method, a
        self.where = f"method {method.name!r}"
        self.template: list[Any] = [None if s is UNDEFINED else s for s in a.static]
        self.steps: list[Step] = []
        self.graph_steps: list[GraphStep] = []
        self.makers: dict[int, list[Port | None]] = {}
        self.readers: dict[int, list[Port | None]] = {}

    # -- arguments --------------------------------------------------------------------------
    def tensor(self, i: int) -> TensorInfo | None:
        """The static tensor value `i` is, None when it is no tensor; else not compilable."""
        v = self.analysis.values[i]
        if v.kind != "tensor":
            return None
        t: TensorInfo = v.value
        if t.shape_dynamism != 0 or not t.is_contiguous_order or t.dtype is None:
            raise NotCompilable
        return t

    def arg(self, i: int) -> Arg:
        static, values = self.analysis.static, self.analysis.values
        if static[i] is not UNDEFINED:
            return Const(static[i])
        if values[i].kind == "tensor":
            return Slot(i)
        if values[i].kind == "int_list" and all(static[j] is not UNDEFINED for j in values[i].value):
            return Const([int(static[j]) for j in values[i].value])
        raise NotCompilable

    def slot_of(self, arg: Arg) -> int:
        """The slot a step reads: a Const gets one of its own, filled at plan time."""
        if isinstance(arg, Slot):
            return arg.index
        self.template.append(arg.value)
        return len(self.template) - 1

    def _note(self, table: dict[int, list[Port | None]], i: int, port: Port | None) -> None:
        table.setdefault(i, []).append(port)

    # -- one handler per instruction kind (executorch/instructions.py) ----------------------
    def kernel(self, pc: int, ins: KernelCall) -> None:
        kd = self.analysis.kernels[pc]
        args = [self.arg(a) for a in ins.args[:kd.n_inputs]]
        outs = list(ins.args[kd.n_inputs:])
        t = self.tensor(outs[0])
        if t is None:
            raise NotCompilable
        w = args[1].value if len(args) == 2 and isinstance(args[1], Const) else None
        a0 = args[0] if args else None
        if (kd.name == "aten::mm.out" and isinstance(a0, Slot) and isinstance(w, np.ndarray)
                and w.ndim == 2 and w.dtype == _F32 and t.dtype == _F32 and len(t.shape) == 2
                and t.shape[1] == w.shape[1] and self._is_f32(a0.index, (t.shape[0], w.shape[0]))):
            # the `out` argument is also the result (one slot); another out slot is a move of it
            first, *others = dict.fromkeys(outs)
            mm = MatmulStep(a0.index, w, first, tuple(t.shape))
            self.steps.append(mm)
            self._note(self.readers, a0.index, Port(mm, 0, (_F32, (t.shape[0], w.shape[0]))))
            self._note(self.makers, first, Port(mm, 0, (_F32, tuple(t.shape))))
            for o in others:
                self._note(self.readers, first, None)
                self._note(self.makers, o, None)
                self.steps.append(MoveStep(first, o))
            return
        where = f"{self.where} instruction {pc} ({kd.name})"
        self.steps.append(KernelStep(kd, [self.slot_of(x) for x in args], outs, t, where))
        for x in args:
            if isinstance(x, Slot):
                self._note(self.readers, x.index, None)
        for o in dict.fromkeys(outs):
            self._note(self.makers, o, None)

    def _is_f32(self, i: int, shape: tuple[int, ...]) -> bool:
        t = self.analysis.values[i].value
        return isinstance(t, TensorInfo) and t.dtype == _F32 and tuple(t.shape) == shape

    def delegate(self, pc: int, ins: DelegateCall) -> None:
        site: DelegateSite = self.method.delegates[ins.delegate_index]
        n_in = self.analysis.delegate_inputs[pc]
        a_in, a_out = list(ins.args[:n_in]), list(ins.args[n_in:])
        if any(self.tensor(a) is None for a in a_in + a_out):
            raise NotCompilable
        spec: GraphSpec = self.context.binaries[site.step.key].graph(site.step.graph)
        in_slots: list[int | None] = [None] * len(spec.inputs)
        for p, a in zip(site.input_positions, a_in):
            in_slots[p] = self.slot_of(self.arg(a))
        out_slots: list[int | None] = [None] * len(spec.outputs)
        for p, a in zip(site.output_positions, a_out):
            out_slots[p] = a
        if None in in_slots or len(site.output_positions) != len(a_out):
            raise NotCompilable
        for p, s in enumerate(out_slots):
            if s is None:   # a graph output the program does not use: a scratch slot
                out_slots[p] = self.slot_of(Const(None))
        step = graph_step(self.context, site.step, len(self.graph_steps),
                          [s for s in in_slots if s is not None],
                          [s for s in out_slots if s is not None], f"graph {site.step.graph!r}")
        _adapt_delegate_inputs(step)
        conversions = []
        for p, a in zip(site.output_positions, a_out):
            t = self.tensor(a)
            assert t is not None
            kind = step.binding.output_kind(p)
            if kind != (t.dtype, tuple(t.shape)):
                conversions.append(OutputConversion(a, p, t))
        self.steps.append(step)
        self.graph_steps.append(step)
        if conversions:
            self.steps.append(ConvertStep(site.step.graph, conversions, self.where))
        converted = {c.slot for c in conversions}
        for p, a in zip(site.output_positions, a_out):
            bindable = a not in converted and not step.binding.dequantized[p]
            self._note(self.makers, a, Port(step, p, step.binding.output_kind(p))
                       if bindable else None)
        for p, s in enumerate(in_slots):
            x = spec.inputs[p]
            if s is not None and s < len(self.analysis.values):
                self._note(self.readers, s, Port(step, p, (x.dtype, tuple(x.shape))))

    def move(self, pc: int, ins: MoveCall) -> None:
        source = self.slot_of(self.arg(ins.move_from))
        if source < len(self.analysis.values):
            self._note(self.readers, source, None)
        self._note(self.makers, ins.move_to, None)
        self.steps.append(MoveStep(source, ins.move_to))

    def free(self, pc: int, ins: FreeCall) -> None:
        self.steps.append(FreeStep(ins.value_index))

    def jump_false(self, pc: int, ins: JumpFalseCall) -> None:
        raise NotCompilable     # not straight-line: the interpreter runs it

    def lower(self) -> None:
        for pc, ins in enumerate(self.analysis.instructions):
            visit(self, pc, ins)
            for dead in self.analysis.free_after.get(pc, ()):
                self.steps.append(FreeStep(dead))

    # -- planned buffers --------------------------------------------------------------------
    def plan_buffers(self) -> None:
        """A value made by one port and read only by ports, all of one kind, never leaving the
        method and not program-given: one buffer, bound into each of them once."""
        a = self.analysis
        boundary = set(a.input_values) | set(a.output_values)
        planned: set[int] = set()
        for i, makers in self.makers.items():
            readers = self.readers.get(i, [])
            if (i in boundary or len(makers) != 1 or not readers
                    or a.static[i] is not UNDEFINED):
                continue
            ports = [p for p in makers + readers if p is not None]
            if len(ports) != len(makers) + len(readers) or len({p.kind for p in ports}) != 1:
                continue
            dtype, shape = ports[0].kind
            buf = self.context.buffer(shape, dtype)
            self.template[i] = buf
            made = ports[0]
            if isinstance(made.step, MatmulStep):
                made.step.result = buf
            else:
                made.step.binding.bind_output(made.index, buf)
            for port in ports[1:]:
                if isinstance(port.step, GraphStep):
                    port.step.binding.bind_input(port.index, buf)
            planned.add(i)
        # a planned buffer lives as long as the plan: freeing its slot would free nothing
        self.steps = [s for s in self.steps if not (isinstance(s, FreeStep) and s.slot in planned)]

    # -- caller arrays ----------------------------------------------------------------------
    def bind_caller(self, arrays: CallerArrays) -> list[tuple[int, np.ndarray]]:
        """Put the caller's arrays in their slots, bound into the graph calls where a graph reads
        or writes them as they are; returns (slot, array) for the outputs a CPU step makes (or a
        conversion), copied into their arrays after each run."""
        a, where = self.analysis, self.where
        ins = {s.name: (s, i) for s, i in zip(self.method.inputs, a.input_values)}
        outs = {s.name: (s, i) for s, i in zip(self.method.outputs, a.output_values)}
        for name, x in arrays.inputs.items():
            spec, i = _caller_slot(ins, name, x, f"{where} input")
            self.template[i] = x
            for port in self.readers.get(i, []):
                if (port is not None and isinstance(port.step, GraphStep)
                        and port.kind == (x.dtype, x.shape)):
                    port.step.binding.bind_input(port.index, x)
        boundary = set(a.input_values) | a.constant_values
        copies = []
        for name, x in arrays.outputs.items():
            spec, o = _caller_slot(outs, name, x, f"{where} output")
            makers = self.makers.get(o, [])
            made = makers[0] if len(makers) == 1 else None
            if (made is not None and isinstance(made.step, GraphStep) and o not in boundary
                    and made.kind == (x.dtype, x.shape)):
                made.step.binding.bind_output(made.index, x)
                self.template[o] = x
            else:
                copies.append((o, x))
        return copies


def _caller_slot(by_name: dict[str, tuple[Any, int]], name: str, x: np.ndarray,
                 what: str) -> tuple[Any, int]:
    """The (spec, slot) of a caller's array, which must be exactly what the method declares."""
    if name not in by_name:
        raise QnnrtError(f"{what} {name!r}: no such tensor; the method has {sorted(by_name)}")
    spec, slot = by_name[name]
    if (not isinstance(x, np.ndarray) or x.dtype != np.dtype(spec.dtype)
            or x.shape != tuple(spec.shape) or not x.flags.c_contiguous or not x.flags.writeable):
        got = (f"{x.dtype}{list(x.shape)}" if isinstance(x, np.ndarray) else type(x).__name__)
        raise QnnrtError(f"{what} {name!r}: the caller's array must be a writeable C-contiguous "
                         f"{np.dtype(spec.dtype)}{list(spec.shape)}, got {got}")
    return spec, slot


class PtePlan(StepPlan):
    """A straight-line .pte method of static tensors as named steps over a slot list; with
    `caller` arrays, bound to them (what `PreparedPte` runs)."""

    def __init__(self, context: PlanContext, method: PteMethodAdapter,
                 caller: CallerArrays | None = None) -> None:
        lowering = _Lowering(context, method)
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
        self.steps = lowering.steps
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
        _adapt_delegate_inputs(g)
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


# the steps above as descriptors a PD worker rebuilds (registered at import)
from qnnrt.executorch import portable as _portable  # noqa: E402,F401
