"""Compiled execution plans: a method turned, once, into steps over integer slots.

Built at a method's first run from the binaries' graph specs (no live context needed):
- a graph step owns copies of the graph's Qnn_Tensor_t arrays; tensors that never leave the method
  live in planned buffers bound into those structs once and reused by every run; method outputs are
  fresh arrays per run (an earlier result never changes); inputs whose dtype and shape are known to
  match are bound without a copy or a check; a graph call is one C call with pre-built args (core.graph.BoundCall);
- a fixed-point output is dequantized in one float32 pass (bit-identical to the float64 path for
  8/16-bit codes: q + offset is exact in float32, and a float32 x float32 product is exact in
  float64, so rounding it once to float32 equals the float32 product);
- a CPU segment runs ONNX Runtime's C entry `run_with_iobinding` on a binding made once over
  planned buffers (the same session, so the same bits as session.run);
- residency: when every context of the method is live and nothing is pending (the pool's
  generation is the one the plan checked), graph calls skip acquire/release altogether; else each
  call goes through the pool as before.
Every run records `timing`: seconds inside graphExecute and in CPU ops (two perf_counter reads per
step).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from qnnrt.core.tensor import address_of, order_inputs, prepare_input
from qnnrt.errors import QnnError, QnnrtError
from qnnrt.runtime.method import CpuStep, Method, QnnStep

if TYPE_CHECKING:
    from qnnrt.runtime.program import Program

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16,
              "tensor(double)": np.float64, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
              "tensor(int16)": np.int16, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
              "tensor(uint16)": np.uint16, "tensor(bool)": np.bool_}
_FAST_DEQUANT = {np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16)}

Meta = "tuple[np.dtype, tuple] | None"  # what a slot is known to hold (dtype, static shape)
R = TypeVar("R")


class RunTiming:
    """What the last run spent inside QNN graph execution and in CPU ops (seconds)."""
    __slots__ = ("accelerator_s", "cpu_ops_s", "graph_calls")

    def __init__(self) -> None:
        self.accelerator_s = 0.0
        self.cpu_ops_s = 0.0
        self.graph_calls = 0

    def reset(self) -> None:
        self.accelerator_s = self.cpu_ops_s = 0.0
        self.graph_calls = 0


def _static(shape) -> bool:
    return all(isinstance(d, int) and d >= 0 for d in shape)


class _Dequant:
    """Raw fixed-point buffer -> float32, one pass, bit-identical to TensorSpec.dequantize."""
    __slots__ = ("offset", "scale", "spec", "fast")

    def __init__(self, spec):
        q = spec._quant()
        self.spec = spec
        self.offset = np.float32(q.offset)
        self.scale = np.float32(q.scale)
        self.fast = (spec.dtype in _FAST_DEQUANT and abs(q.offset) < 2 ** 24
                     and float(self.offset) == q.offset and float(self.scale) == q.scale)

    def __call__(self, raw: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        if not self.fast:
            r = self.spec.dequantize(raw)
            if out is None:
                return r
            out[...] = r
            return out
        if out is None:
            out = np.empty(raw.shape, np.float32)
        np.add(raw, self.offset, out=out, dtype=np.float32)
        np.multiply(out, self.scale, out=out)
        return out


class GraphStep:
    """One QNN graph call with its I/O bound ahead."""

    def __init__(self, plan: "MethodPlan", step: QnnStep, position: int, spec, where: str):
        self.key, self.graph_name, self.position = step.key, step.graph, position
        self.where = where
        self.handle: Any = None   # the live graph's handle, set by the residency fast path
        self.call = call = plan.program.bound_call(step.key, spec)
        no = len(spec.outputs)
        # per-call work lists
        self.dyn_in: list[tuple[int, int]] = []          # (input, slot): bind per call
        self.checked_in: list[tuple[int, int, Any]] = []  # (input, slot, spec): prepare + bind
        self.fresh_out: list[tuple[int, int, tuple, np.dtype]] = []  # bind a new array per call
        self.deq_out: list[tuple[np.ndarray, int, _Dequant, np.ndarray | None]] = []
        flags = ([step.dequantize] * no if isinstance(step.dequantize, bool)
                 else list(step.dequantize))
        for i, (name, s) in enumerate(zip(step.inputs, spec.inputs)):
            slot = plan.slot(name)
            meta = plan.meta.get(slot)
            fixed = plan.planned.get(slot)
            if meta is not None and meta == (s.dtype, tuple(s.shape)):
                if fixed is not None:
                    call.set_input(i, fixed)
                else:
                    call.set_input_size(i, s.nbytes)
                    self.dyn_in.append((i, slot))
            else:
                self.checked_in.append((i, slot, s))
        for j, (name, s) in enumerate(zip(step.outputs, spec.outputs)):
            slot = plan.slot(name)
            keep = slot in plan.out_slots
            shape = tuple(s.shape)
            if s.is_fixed_point and flags[j]:
                raw = np.zeros(shape, s.dtype)
                call.set_output(j, raw)
                target = None if keep else plan.plan_buffer(slot, shape, np.dtype(np.float32))
                self.deq_out.append((raw, slot, _Dequant(s), target))
                plan.meta[slot] = (np.dtype(np.float32), shape)
            else:
                plan.meta[slot] = (s.dtype, shape)
                if keep:
                    call.set_output_size(j, s.nbytes)
                    self.fresh_out.append((j, slot, shape, s.dtype))
                else:
                    call.set_output(j, plan.plan_buffer(slot, shape, s.dtype))

    def run(self, v: list, handle) -> float:
        keep = []
        call = self.call
        for i, slot in self.dyn_in:
            call.point_input(i, v[slot])
        for i, slot, s in self.checked_in:
            a = prepare_input(s, v[slot], self.where)
            keep.append(a)
            call.set_input(i, a)
        for j, slot, shape, dt in self.fresh_out:
            a = v[slot] = np.empty(shape, dt)
            call.point_output(j, a)
        dt_s = call(handle)
        for raw, slot, deq, target in self.deq_out:
            v[slot] = deq(raw, target)
        return dt_s


class OrtStep:
    """A CPU segment on an IOBinding made once over planned buffers (or session.run when its
    types or shapes are not static)."""

    def __init__(self, plan: "MethodPlan", seg):
        self.seg = seg
        self.in_slots = [plan.slot(n) for n in seg._feed_names]
        self.out_slots = [plan.slot(n) for n in seg.outputs]
        self.copy_in: list[tuple[np.ndarray, int]] = []
        self.copy_out: list[tuple[np.ndarray, int]] = []
        self.bound = self._bind(plan)
        if not self.bound:  # session.run: what comes out is checked where it is used
            for slot in self.out_slots:
                plan.meta[slot] = None

    def _bind(self, plan: "MethodPlan") -> bool:
        import onnxruntime as ort
        from onnx import helper
        seg, sess = self.seg, self.seg.session
        ins = {i.name: i for i in sess.get_inputs()}
        metas = []
        for name, slot in zip(seg._feed_names, self.in_slots):
            ort_t = _ORT_TYPES.get(ins[name].type)
            meta = plan.meta.get(slot)
            if ort_t is None or meta is None or meta[0] != np.dtype(ort_t) or not _static(meta[1]):
                return False
            metas.append(meta)
        outs = []
        for name in seg.outputs:
            t = seg.output_types.get(name)
            if t is None or t[1] is None or not _static(t[1]):
                return False
            try:
                odt = np.dtype(helper.tensor_dtype_to_np_dtype(t[0]))
            except Exception:
                return False
            outs.append((odt, tuple(int(d) for d in t[1])))
        io = sess.io_binding()
        for name, slot, (idt, ishape) in zip(seg._feed_names, self.in_slots, metas):
            b = plan.planned.get(slot)
            if b is None:  # a method input / fresh array: copied into a staging buffer
                b = np.zeros(ishape, idt)
                self.copy_in.append((b, slot))
            io.bind_input(name, "cpu", 0, idt, list(ishape), address_of(b))
        for name, slot, (dt, shape) in zip(seg.outputs, self.out_slots, outs):
            if slot in plan.out_slots:
                b = np.zeros(shape, dt)
                self.copy_out.append((b, slot))
            else:
                b = plan.plan_buffer(slot, shape, dt)
            io.bind_output(name, "cpu", 0, dt, list(shape), address_of(b))
            plan.meta[slot] = (dt, shape)
        self._io = io  # keeps the binding alive
        self._run = sess._sess.run_with_iobinding
        self._ib = io._iobinding
        self._ro = ort.RunOptions()
        return True

    def run(self, v: list) -> float:
        pc = time.perf_counter
        if not self.bound:
            t0 = pc()
            res = self.seg.session.run(self.seg._out_names, {n: v[s] for n, s in
                                                            zip(self.seg._feed_names, self.in_slots)})
            dt_s = pc() - t0
            for s, r in zip(self.out_slots, res):
                v[s] = r
            return dt_s
        for b, slot in self.copy_in:
            np.copyto(b, v[slot])
        t0 = pc()
        self._run(self._ib, self._ro)
        dt_s = pc() - t0
        for b, slot in self.copy_out:
            v[slot] = b.copy()
        return dt_s


class _Residency:
    """The residency fast path shared by the plans: `keys`, `graph_steps`, `program`."""
    program: "Program"
    keys: list[str]
    _gen: int | None
    _contexts: list

    @property
    def graph_steps(self) -> list:
        raise NotImplementedError

    def _all_live(self) -> bool:
        """True when every context is live and nothing pending (cheap when nothing changed)."""
        pool = self.program.pool
        if self._gen is not None and pool.generation == self._gen:
            for c in self._contexts:
                if c._closed:
                    break
            else:
                return True
        gen = pool.all_live(self.keys)
        if gen is None:
            self._gen = None
            return False
        ctxs = {k: pool._live[k] for k in self.keys}
        for g in self.graph_steps:
            g.handle = ctxs[g.key].graph(g.graph_name).handle
        self._contexts = list(ctxs.values())
        self._gen = gen
        return True

    def _rerun(self, key: str, graph: str, error: QnnError, fast: bool,
               run: "Callable[..., R]", *args: Any) -> R:
        """The graph call `run(*args, handle)` failed with `error`: the program's recovery policy
        (runtime/recovery.py) re-creates what the error calls for, or raises, and the call runs
        again on the new graph handle. Then every step is re-bound to the new handles, so the rest
        of a fast-path run goes on."""
        out = self.program.recovery.rerun(key, graph, error,
                                          lambda c: run(*args, c.graph(graph).handle))
        self._gen = None
        if not self._all_live() and fast:  # recreate keeps the live set: never expected
            raise QnnrtError(f"after recovering graph {graph!r}, a context of the method is not "
                             f"live; run again")
        return out


class MethodPlan(_Residency):
    """A Method (QNN steps and ONNX Runtime CPU segments) compiled for one Program."""

    def __init__(self, program: "Program", method: Method):
        self.program, self.method = program, method
        self.where = f"method {method.name!r}"
        self.slots: dict[str, int] = {}
        self.meta: dict[int, Any] = {}
        self.planned: dict[int, np.ndarray] = {}
        self.in_names = [s.name for s in method.inputs]
        self.in_specs = list(method.inputs)
        self.in_slots = [self.slot(n) for n in self.in_names]
        in_set = set(self.in_slots)
        for s, slot in zip(method.inputs, self.in_slots):
            if _static(s.shape):
                self.meta[slot] = (np.dtype(s.dtype), tuple(s.shape))
        constants = getattr(method, "_constants", {})
        self.out_names = [o.name for o in method.outputs]
        self.out_slots = {self.slot(n) for n in self.out_names}
        self.out_list = [(n, self.slot(n), self.slot(n) in in_set) for n in self.out_names]
        const_vals = {self.slot(n): a for n, a in constants.items()}
        self.steps: list[Any] = []
        self._graph_steps: list[GraphStep] = []
        position = 0
        for step in method.steps:
            if isinstance(step, QnnStep):
                spec = program.binaries[step.key].graph(step.graph)
                g = GraphStep(self, step, position, spec,
                              f"graph {step.graph!r} of {self.where}")
                self.steps.append(g)
                self._graph_steps.append(g)
                position += 1
            elif isinstance(step, CpuStep):
                self.steps.append(OrtStep(self, step.segment))
            else:
                raise QnnrtError(f"{self.where}: unknown step {type(step).__name__}")
        self.template: list = [None] * len(self.slots)
        for slot, b in self.planned.items():
            self.template[slot] = b
        for slot, a in const_vals.items():
            self.template[slot] = a
        self.order = [g.key for g in self._graph_steps]
        self.keys = sorted(set(self.order))
        self.is_graph = [isinstance(s, GraphStep) for s in self.steps]
        self._gen: int | None = None
        self._contexts: list = []
        self.timing = RunTiming()

    @property
    def graph_steps(self) -> list:
        return self._graph_steps

    # -- planning ---------------------------------------------------------------------------
    def slot(self, name: str) -> int:
        s = self.slots.get(name)
        if s is None:
            s = self.slots[name] = len(self.slots)
        return s

    def plan_buffer(self, slot: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
        b = self.planned.get(slot)
        if b is None or b.shape != shape or b.dtype != dtype:
            b = self.planned[slot] = self.program.buffer(shape, dtype)
        return b

    # -- running ----------------------------------------------------------------------------
    def run(self, inputs) -> dict[str, np.ndarray]:
        values = order_inputs(self.in_names, inputs, self.where)
        v = self.template.copy()
        for s, slot, x in zip(self.in_specs, self.in_slots, values):
            v[slot] = prepare_input(s, x, self.where)
        timing = self.timing
        acc = cpu = 0.0
        program = self.program
        if self._all_live():
            for step, is_graph in zip(self.steps, self.is_graph):
                if is_graph:
                    program.graph_calls += 1  # as they happen: progress lines read it
                    try:
                        acc += step.run(v, step.handle)
                    except QnnError as e:
                        acc += self._rerun(step.key, step.graph_name, e, True, step.run, v)
                else:
                    cpu += step.run(v)
        else:
            pool = program.pool
            pool.set_order(self.order)
            for step, is_graph in zip(self.steps, self.is_graph):
                if not is_graph:
                    cpu += step.run(v)
                    continue
                program.graph_calls += 1
                ctx = pool.acquire(step.key, step.position)
                try:
                    try:
                        acc += step.run(v, ctx.graph(step.graph_name).handle)
                    except QnnError as e:
                        acc += self._rerun(step.key, step.graph_name, e, False, step.run, v)
                finally:
                    pool.release(step.key, step.position)
        timing.accelerator_s, timing.cpu_ops_s = acc, cpu
        timing.graph_calls = len(self._graph_steps)
        return {n: (v[slot].copy() if is_in else v[slot]) for n, slot, is_in in self.out_list}


class _DelegateStep:
    """A .pte delegate's graph call: inputs bound per call (cheap check, else prepare_input),
    outputs into fresh arrays (the interpreter owns them), fixed-point ones dequantized in one pass."""

    def __init__(self, program: "Program", step: QnnStep, spec):
        self.key, self.graph_name = step.key, step.graph
        self.where = f"graph {step.graph!r}"
        self.handle: Any = None
        self.call = call = program.bound_call(step.key, spec)
        no = len(spec.outputs)
        self.ins = [(i, s.dtype, tuple(s.shape), s) for i, s in enumerate(spec.inputs)]
        for i, s in enumerate(spec.inputs):
            call.set_input_size(i, s.nbytes)
        flags = ([step.dequantize] * no if isinstance(step.dequantize, bool)
                 else list(step.dequantize))
        self.outs: list[tuple[int, tuple, np.dtype, _Dequant | None, Any]] = []
        for j, s in enumerate(spec.outputs):
            call.set_output_size(j, s.nbytes)
            if s.is_fixed_point and flags[j]:
                raw = np.zeros(s.shape, s.dtype)
                call.set_output(j, raw)
                self.outs.append((j, tuple(s.shape), s.dtype, _Dequant(s), raw))
            else:
                self.outs.append((j, tuple(s.shape), s.dtype, None, None))
        self.any_deq = any(o[3] is not None for o in self.outs)
        self.fixed_out: dict[int, np.ndarray] = {}
        self.dyn_ins = list(self.ins)

    def fix(self, ins: dict[int, np.ndarray], outs: dict[int, np.ndarray]) -> None:
        """Bind planned buffers once: inputs/outputs at these positions are not bound per call
        (an output at a fixed position is returned as that buffer)."""
        for i, b in ins.items():
            self.call.point_input(i, b)
        self.dyn_ins = [x for x in self.ins if x[0] not in ins]
        for j, b in outs.items():
            _, shape, dt, deq, raw = self.outs[j]
            assert deq is None and b.dtype == dt and b.shape == shape
            self.call.point_output(j, b)
            self.fixed_out[j] = b

    def run(self, arrays, handle) -> tuple[list, float]:
        keep = []
        call = self.call
        for i, dt, shape, s in self.dyn_ins:
            a = arrays[i]
            if a.dtype != dt or a.shape != shape or not a.flags.c_contiguous:
                a = prepare_input(s, a, self.where)
                keep.append(a)
            call.point_input(i, a)
        res = []
        fixed = self.fixed_out
        for j, shape, dt, deq, raw in self.outs:
            if j in fixed:
                res.append(fixed[j])
            elif deq is None:
                o = np.empty(shape, dt)
                call.point_output(j, o)
                res.append(o)
            else:
                res.append(raw)
        dt_s = call(handle)
        if self.any_deq:
            for k, (_, shape, dt, deq, raw) in enumerate(self.outs):
                if deq is not None:
                    res[k] = deq(raw, None)
        return res, dt_s


class DelegatePlan(_Residency):
    """The graph calls of a .pte method (the interpreter keeps the CPU kernels): prepared steps,
    and the residency fast path of MethodPlan."""

    def __init__(self, program: "Program", method):
        self.program, self.method = program, method
        self.by_step: dict[int, _DelegateStep] = {}
        for step, _, _ in method._calls.values():
            self.by_step[id(step)] = _DelegateStep(program, step,
                                                   program.binaries[step.key].graph(step.graph))
        self.order = method.graph_order
        self.keys = sorted(set(self.order))
        self._gen: int | None = None
        self._contexts: list = []
        self.timing = RunTiming()
        self._acc = 0.0
        self._fast = False

    @property
    def graph_steps(self) -> list:
        return list(self.by_step.values())

    def run_graph(self, step: QnnStep, position: int, arrays: list) -> list:
        d = self.by_step[id(step)]
        self.program.graph_calls += 1  # as they happen: progress lines read it
        if self._fast:
            try:
                out, dt_s = d.run(arrays, d.handle)
            except QnnError as e:
                out, dt_s = self._rerun(step.key, step.graph, e, True, d.run, arrays)
        else:
            pool = self.program.pool
            ctx = pool.acquire(step.key, position)
            try:
                try:
                    out, dt_s = d.run(arrays, ctx.graph(step.graph).handle)
                except QnnError as e:
                    out, dt_s = self._rerun(step.key, step.graph, e, False, d.run, arrays)
            finally:
                pool.release(step.key, position)
        self._acc += dt_s
        return out

    def run(self, inputs) -> dict[str, np.ndarray]:
        runner = self.method._runner
        self._acc = 0.0
        runner.kernel_seconds = 0.0
        self._fast = self._all_live()
        if not self._fast:
            self.program.pool.set_order(self.order)
        out = self.method.run(inputs, self.run_graph)
        self.timing.accelerator_s, self.timing.cpu_ops_s = self._acc, runner.kernel_seconds
        self.timing.graph_calls = len(self.order)
        return out


class NotCompilable(Exception):
    """A method the planner cannot compile: it runs on the reference path (or a lighter plan)."""
