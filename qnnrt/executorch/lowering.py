""".pte methods lowered to steps (steps.py; the plans that run them: plan.py): a straight-line method of
static tensors becomes named steps over a slot list, one per instruction:

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

from qnnrt.errors import QnnrtError
from qnnrt.executorch.delegates import DelegateSite
from qnnrt.executorch.instructions import InstructionVisitor, visit
from qnnrt.executorch.analysis import UNDEFINED, MethodAnalysis
from qnnrt.executorch.reader import (DelegateCall, FreeCall, JumpFalseCall, KernelCall, MoveCall,
                                     TensorInfo)
from qnnrt.runtime.plan import CallerArrays, graph_step
from qnnrt.runtime.steps import GraphStep, Step
from qnnrt.executorch.steps import (Arg, Const, ConvertStep, F32, FreeStep, Kind, KernelStep, MatmulStep,
                                    MoveStep, OutputConversion, Slot, adapt_delegate_inputs)

if TYPE_CHECKING:
    from qnnrt.core.binary import GraphSpec
    from qnnrt.executorch.program import PteMethodAdapter
    from qnnrt.runtime.plan_context import PlanContext


class NotCompilable(Exception):
    """The method is not straight-line and static: it runs on InterpretedPlan."""


# ---------------------------------------------------------------------------- compiling a method
@dataclass(frozen=True)
class Port:
    """A place a planned buffer can be bound once: a delegate step's graph input / output, a matmul
    step's left operand / result. `None` in a port list: a user that takes whatever it is given."""
    step: GraphStep | MatmulStep
    index: int          # graph input / output position (0 for a matmul)
    kind: Kind


class Lowering(InstructionVisitor[None]):
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
                and w.ndim == 2 and w.dtype == F32 and t.dtype == F32 and len(t.shape) == 2
                and t.shape[1] == w.shape[1] and self._is_f32(a0.index, (t.shape[0], w.shape[0]))):
            # the `out` argument is also the result (one slot); another out slot is a move of it
            first, *others = dict.fromkeys(outs)
            mm = MatmulStep(a0.index, w, first, tuple(t.shape))
            self.steps.append(mm)
            self._note(self.readers, a0.index, Port(mm, 0, (F32, (t.shape[0], w.shape[0]))))
            self._note(self.makers, first, Port(mm, 0, (F32, tuple(t.shape))))
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
        return isinstance(t, TensorInfo) and t.dtype == F32 and tuple(t.shape) == shape

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
        adapt_delegate_inputs(step)
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
            spec, i = caller_slot(ins, name, x, f"{where} input")
            self.template[i] = x
            for port in self.readers.get(i, []):
                if (port is not None and isinstance(port.step, GraphStep)
                        and port.kind == (x.dtype, x.shape)):
                    port.step.binding.bind_input(port.index, x)
        boundary = set(a.input_values) | a.constant_values
        copies = []
        for name, x in arrays.outputs.items():
            spec, o = caller_slot(outs, name, x, f"{where} output")
            makers = self.makers.get(o, [])
            made = makers[0] if len(makers) == 1 else None
            if (made is not None and isinstance(made.step, GraphStep) and o not in boundary
                    and made.kind == (x.dtype, x.shape)):
                made.step.binding.bind_output(made.index, x)
                self.template[o] = x
            else:
                copies.append((o, x))
        return copies


def caller_slot(by_name: dict[str, tuple[Any, int]], name: str, x: np.ndarray,
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
