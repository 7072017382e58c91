"""Compiled execution plans: a method turned, once, into steps over integer slots.

Built at a method's first run from the binaries' graph specs (no live context needed):
- a graph step owns copies of the graph's Qnn_Tensor_t arrays; tensors that never leave the method
  live in planned buffers bound into those structs once and reused by every run; method outputs are
  fresh arrays per run (an earlier result never changes); inputs whose dtype and shape are known to
  match are bound without a copy or a check; a graph call is one ctypes call with pre-built args;
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

import ctypes as C
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from qnnrt._capi import log as _log
from qnnrt._capi import types as T
from qnnrt.core.tensor import IOTensor, order_inputs, prepare_input
from qnnrt.errors import QnnrtError
from qnnrt.runtime.method import CpuStep, Method, QnnStep

if TYPE_CHECKING:
    from qnnrt.runtime.program import Program

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16,
              "tensor(double)": np.float64, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
              "tensor(int16)": np.int16, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
              "tensor(uint16)": np.uint16, "tensor(bool)": np.bool_}
_FAST_DEQUANT = {np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16)}

Meta = "tuple[np.dtype, tuple] | None"  # what a slot is known to hold (dtype, static shape)


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


def _buf_ptr(arr: np.ndarray) -> int:
    return arr.ctypes.data


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
        self.handle = C.c_void_p()
        self._tensors = [IOTensor(s) for s in spec.inputs] + [IOTensor(s) for s in spec.outputs]
        ni, no = len(spec.inputs), len(spec.outputs)
        self.ia = (T.Tensor * max(1, ni))()
        self.oa = (T.Tensor * max(1, no))()
        for i, t in enumerate(self._tensors[:ni]):
            self.ia[i] = t.struct
        for i, t in enumerate(self._tensors[ni:]):
            self.oa[i] = t.struct
        self.ni, self.no = C.c_uint32(ni), C.c_uint32(no)
        # per-call work lists
        self.dyn_in: list[tuple[Any, int]] = []          # (clientBuf, slot): bind per call
        self.checked_in: list[tuple[Any, int, Any]] = []  # (clientBuf, slot, spec): prepare + bind
        self.fresh_out: list[tuple[Any, int, tuple, np.dtype]] = []  # bind a new array per call
        self.deq_out: list[tuple[np.ndarray, int, _Dequant, np.ndarray | None]] = []
        flags = ([step.dequantize] * no if isinstance(step.dequantize, bool)
                 else list(step.dequantize))
        for i, (name, s) in enumerate(zip(step.inputs, spec.inputs)):
            cb = self.ia[i].body.clientBuf
            slot = plan.slot(name)
            meta = plan.meta.get(slot)
            fixed = plan.planned.get(slot)
            if meta is not None and meta == (s.dtype, tuple(s.shape)):
                if fixed is not None:
                    cb.data, cb.dataSize = _buf_ptr(fixed), fixed.nbytes
                else:
                    cb.dataSize = s.nbytes
                    self.dyn_in.append((cb, slot))
            else:
                self.checked_in.append((cb, slot, s))
        for j, (name, s) in enumerate(zip(step.outputs, spec.outputs)):
            cb = self.oa[j].body.clientBuf
            slot = plan.slot(name)
            keep = slot in plan.out_slots
            shape = tuple(s.shape)
            if s.is_fixed_point and flags[j]:
                raw = np.zeros(shape, s.dtype)
                cb.data, cb.dataSize = _buf_ptr(raw), raw.nbytes
                target = None if keep else plan.plan_buffer(slot, shape, np.dtype(np.float32))
                self.deq_out.append((raw, slot, _Dequant(s), target))
                plan.meta[slot] = (np.dtype(np.float32), shape)
            else:
                plan.meta[slot] = (s.dtype, shape)
                if keep:
                    cb.dataSize = s.nbytes
                    self.fresh_out.append((cb, slot, shape, s.dtype))
                else:
                    b = plan.plan_buffer(slot, shape, s.dtype)
                    cb.data, cb.dataSize = _buf_ptr(b), b.nbytes
        self.backend = plan.program.backend
        self.execute = self.backend.api.graphExecute

    def run(self, v: list, handle) -> float:
        keep = []
        for cb, slot in self.dyn_in:
            cb.data = v[slot].ctypes.data
        for cb, slot, s in self.checked_in:
            a = prepare_input(s, v[slot], self.where)
            keep.append(a)
            cb.data, cb.dataSize = a.ctypes.data, a.nbytes
        for cb, slot, shape, dt in self.fresh_out:
            a = v[slot] = np.empty(shape, dt)
            cb.data = a.ctypes.data
        pc = time.perf_counter
        t0 = pc()
        rc = self.execute(handle, self.ia, self.ni, self.oa, self.no, None, None)
        dt_s = pc() - t0
        if rc or _log._pending is not None:  # an error, or an interrupt deferred by the log callback
            self.failed(rc)
        for raw, slot, deq, target in self.deq_out:
            v[slot] = deq(raw, target)
        return dt_s

    def failed(self, rc: int) -> None:
        self.backend.check(rc, "graphExecute", None, f"for graph {self.graph_name!r}")


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
            io.bind_input(name, "cpu", 0, idt, list(ishape), b.ctypes.data)
        for name, slot, (dt, shape) in zip(seg.outputs, self.out_slots, outs):
            if slot in plan.out_slots:
                b = np.zeros(shape, dt)
                self.copy_out.append((b, slot))
            else:
                b = plan.plan_buffer(slot, shape, dt)
            io.bind_output(name, "cpu", 0, dt, list(shape), b.ctypes.data)
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
            b = self.planned[slot] = np.zeros(shape, dtype)
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
                    acc += step.run(v, step.handle)
                else:
                    cpu += step.run(v)
            program.graph_calls += len(self._graph_steps)
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
                    acc += step.run(v, ctx.graph(step.graph_name).handle)
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
        self.backend = program.backend
        self.execute = self.backend.api.graphExecute
        self.handle = C.c_void_p()
        self._tensors = [IOTensor(s) for s in spec.inputs] + [IOTensor(s) for s in spec.outputs]
        ni, no = len(spec.inputs), len(spec.outputs)
        self.ia = (T.Tensor * max(1, ni))()
        self.oa = (T.Tensor * max(1, no))()
        for i, t in enumerate(self._tensors[:ni]):
            self.ia[i] = t.struct
        for i, t in enumerate(self._tensors[ni:]):
            self.oa[i] = t.struct
        self.ni, self.no = C.c_uint32(ni), C.c_uint32(no)
        self.ins = [(self.ia[i].body.clientBuf, s.dtype, tuple(s.shape), s)
                    for i, s in enumerate(spec.inputs)]
        flags = ([step.dequantize] * no if isinstance(step.dequantize, bool)
                 else list(step.dequantize))
        self.outs: list[tuple[Any, tuple, np.dtype, _Dequant | None, Any]] = []
        for j, s in enumerate(spec.outputs):
            cb = self.oa[j].body.clientBuf
            cb.dataSize = s.nbytes
            if s.is_fixed_point and flags[j]:
                raw = np.zeros(s.shape, s.dtype)
                cb.data = raw.ctypes.data
                self.outs.append((cb, tuple(s.shape), s.dtype, _Dequant(s), raw))
            else:
                self.outs.append((cb, tuple(s.shape), s.dtype, None, None))
        self.any_deq = any(o[3] is not None for o in self.outs)
        self.fixed_out: dict[int, np.ndarray] = {}
        self.dyn_ins = [(i, *x) for i, x in enumerate(self.ins)]

    def fix(self, ins: dict[int, np.ndarray], outs: dict[int, np.ndarray]) -> None:
        """Bind planned buffers once: inputs/outputs at these positions are not bound per call
        (an output at a fixed position is returned as that buffer)."""
        for i, b in ins.items():
            self.ins[i][0].data = b.ctypes.data
        self.dyn_ins = [(i, *x) for i, x in enumerate(self.ins) if i not in ins]
        for j, b in outs.items():
            cb, shape, dt, deq, raw = self.outs[j]
            assert deq is None and b.dtype == dt and b.shape == shape
            cb.data = b.ctypes.data
            self.fixed_out[j] = b

    def run(self, arrays, handle) -> tuple[list, float]:
        keep = []
        for i, cb, dt, shape, s in self.dyn_ins:
            a = arrays[i]
            if a.dtype != dt or a.shape != shape or not a.flags.c_contiguous:
                a = prepare_input(s, a, self.where)
                keep.append(a)
            cb.data = a.ctypes.data
        res = []
        fixed = self.fixed_out
        for j, (cb, shape, dt, deq, raw) in enumerate(self.outs):
            if j in fixed:
                res.append(fixed[j])
            elif deq is None:
                o = np.empty(shape, dt)
                cb.data = o.ctypes.data
                res.append(o)
            else:
                res.append(raw)
        pc = time.perf_counter
        t0 = pc()
        rc = self.execute(handle, self.ia, self.ni, self.oa, self.no, None, None)
        dt_s = pc() - t0
        if rc or _log._pending is not None:
            self.backend.check(rc, "graphExecute", None, f"for graph {self.graph_name!r}")
        if self.any_deq:
            for k, (cb, shape, dt, deq, raw) in enumerate(self.outs):
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
        if self._fast:
            out, dt_s = d.run(arrays, d.handle)
        else:
            pool = self.program.pool
            ctx = pool.acquire(step.key, position)
            try:
                out, dt_s = d.run(arrays, ctx.graph(step.graph).handle)
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
        self.program.graph_calls += len(self.order)
        self.timing.accelerator_s, self.timing.cpu_ops_s = self._acc, runner.kernel_seconds
        self.timing.graph_calls = len(self.order)
        return out


class PtePlan(DelegatePlan):
    """A .pte method compiled at load: instructions over a slot list (no dict, no name lookups),
    kernels as bound closures (aten::mm.out as np.matmul(a, W, out=) when the dtypes allow it,
    decided at load), delegates by slot through prepared graph steps. Only straight-line methods
    (kernel / delegate / move / free instructions) of static, default-dim-order tensors without
    mutable state compile; `PtePlan.compile` returns None for the others (DelegatePlan runs them)."""

    @classmethod
    def compile(cls, program: "Program", method) -> "DelegatePlan":
        try:
            return cls(program, method)
        except _NotCompilable:
            return DelegatePlan(program, method)

    def __init__(self, program: "Program", method):
        super().__init__(program, method)
        from qnnrt.executorch.interpreter import _UNDEF, DelegateCall, FreeCall, KernelCall, MoveCall
        from qnnrt.executorch import kernels as K
        r = method._runner
        if r._mutable_init:
            raise _NotCompilable
        values, static = r._values, r._static
        self.n = len(values)
        self.template: list = [None] * self.n
        for i, s in enumerate(static):
            if s is not _UNDEF:
                self.template[i] = s

        def tensor(i: int):
            v = values[i]
            if v.kind != "tensor":
                return None
            t = v.value
            if t.shape_dynamism != 0 or not t.is_contiguous_order or t.dtype is None:
                raise _NotCompilable
            return t

        def arg(i: int):
            """('s', slot) for a value produced at run time, ('c', value) for a static one."""
            if static[i] is not _UNDEF:
                return ("c", static[i])
            k = values[i].kind
            if k == "tensor":
                return ("s", i)
            if k == "int_list" and all(static[j] is not _UNDEF for j in values[i].value):
                return ("c", [int(static[j]) for j in values[i].value])
            raise _NotCompilable

        self.ops: list[Any] = []   # (kind, payload): 0 kernel closure, 1 delegate, 2 move, 3 free
        self._mm: dict[int, tuple] = {}
        reads: dict[int, list] = {}     # value -> its readers: ("mm", pc) / ("d", step, position) / ("x",)
        makers: dict[int, list] = {}    # value -> its producers: ("mm", pc) / ("d", step, position)
        self.kernel_steps = 0
        calls = method._calls
        for pc, ins in enumerate(r._instrs):
            if isinstance(ins, KernelCall):
                kd = r._kernels[pc]
                n_in = kd.n_inputs
                args = [arg(a) for a in ins.args[:n_in]]
                outs = list(ins.args[n_in:])
                t = tensor(outs[0])
                if t is None:
                    raise _NotCompilable
                self.ops.append((0, self._kernel(pc, kd, args, outs, t, K, r)))
                self.kernel_steps += 1
                is_mm = pc in self._mm
                for k, x in args:
                    if k == "s":
                        reads.setdefault(x, []).append(("mm", pc) if is_mm and x == args[0][1]
                                                       else ("x",))
                for oi in dict.fromkeys(outs):
                    makers.setdefault(oi, []).append(("mm", pc) if is_mm else ("x",))
            elif isinstance(ins, DelegateCall):
                step, in_pos, out_pos = calls[ins.delegate_index]
                n_in = r._split[pc]
                a_in, a_out = list(ins.args[:n_in]), list(ins.args[n_in:])
                for a in a_in + a_out:
                    if tensor(a) is None:
                        raise _NotCompilable
                src = [arg(a) for a in a_in]
                order: list[Any] = [None] * len(step.inputs)
                for p, s in zip(in_pos, src):
                    order[p] = s
                if any(o is None for o in order) or len(out_pos) != len(a_out):
                    raise _NotCompilable
                d = self.by_step[id(step)]
                post = []
                for k, p in enumerate(out_pos):
                    t = tensor(a_out[k])
                    _, shape, dt, deq, _ = d.outs[p]
                    got = np.dtype(np.float32) if deq is not None else dt
                    conv = t is not None and (got != t.dtype or shape != tuple(t.shape))
                    post.append((a_out[k], p, t if conv else None))
                    makers.setdefault(a_out[k], []).append(
                        ("d", step, p) if not conv and deq is None else ("x",))
                for p, (k, x) in enumerate(order):
                    if k == "s":
                        reads.setdefault(x, []).append(("d", step, p))
                shapes = [tuple(values[a].value.shape) for a in a_in]
                reshape = any(shapes[k] != d.ins[p][2] for k, p in enumerate(in_pos))
                self.ops.append((1, [d, step, order, post, reshape]))
            elif isinstance(ins, MoveCall):
                mv = arg(ins.move_from)
                if mv[0] == "s":
                    reads.setdefault(mv[1], []).append(("x",))
                makers.setdefault(ins.move_to, []).append(("x",))
                self.ops.append((2, (mv, ins.move_to)))
            elif isinstance(ins, FreeCall):
                self.ops.append((3, ins.value_index))
            else:
                raise _NotCompilable
            for fv in r._free_after.get(pc, ()):
                self.ops.append((3, fv))
        self._plan_buffers(r, reads, makers, _UNDEF)
        self.in_specs = list(method.inputs)
        self.in_idx = list(r._input_idx)
        self.outs = [(s.value_index, s.value_index in r._const_idx or s.value_index in self.in_idx)
                     for s in r.method.outputs]
        self.out_names = [s.name for s in method.outputs]
        self.where = f"method {method.name!r}"

    def _plan_buffers(self, r, reads: dict, makers: dict, undef) -> None:
        """Values made by one delegate / float32 mm and read only by delegates / float32 mm's,
        never leaving the method, live in planned buffers bound into the graph structs once."""
        uses: dict[int, int] = {}
        for step, _, _ in self.method._calls.values():
            uses[id(step)] = 0
        for s in self.method.steps:
            uses[id(s)] = uses.get(id(s), 0) + 1
        boundary = set(r._input_idx) | set(r._output_idx)
        fix_in: dict[int, dict] = {}
        fix_out: dict[int, dict] = {}

        def made(op):   # (dtype, shape) the producer writes
            if op[0] == "mm":
                return np.dtype(np.float32), self._mm[op[1]][2]
            o = self.by_step[id(op[1])].outs[op[2]]
            return np.dtype(o[2]), o[1]

        def read(op):   # (dtype, shape) the reader binds without a check
            if op[0] == "mm":
                return np.dtype(np.float32), self._mm[op[1]][4]
            x = self.by_step[id(op[1])].ins[op[2]]
            return np.dtype(x[1]), x[2]

        for i, mk in makers.items():
            rd = reads.get(i, [])
            if i in boundary or len(mk) != 1 or not rd or r._static[i] is not undef:
                continue
            if any(op[0] == "x" or (op[0] == "d" and uses.get(id(op[1])) != 1) for op in mk + rd):
                continue
            want = {made(mk[0])} | {read(op) for op in rd}
            if len(want) != 1:
                continue
            dt, shape = want.pop()
            buf = np.zeros(shape, dt)
            self.template[i] = buf
            op = mk[0]
            if op[0] == "mm":
                self._mm[op[1]][3][0] = buf
            else:
                fix_out.setdefault(id(op[1]), {})[op[2]] = buf
            for op in rd:
                if op[0] == "d":
                    fix_in.setdefault(id(op[1]), {})[op[2]] = buf
        for key in set(fix_in) | set(fix_out):
            self.by_step[key].fix(fix_in.get(key, {}), fix_out.get(key, {}))

    def _kernel(self, pc, kd, args, outs, t, K, r):
        info = K.OutInfo(t.dtype, t.shape)
        name, cast = kd.name, kd.cast
        if (kd.name == "aten::mm.out" and args[0][0] == "s" and args[1][0] == "c"
                and isinstance(args[1][1], np.ndarray) and args[1][1].ndim == 2
                and t.dtype == np.float32 and args[1][1].dtype == np.float32
                and len(t.shape) == 2 and t.shape[1] == args[1][1].shape[1]
                and r._values[args[0][1]].value.dtype == np.float32
                and tuple(r._values[args[0][1]].value.shape) == (t.shape[0], args[1][1].shape[0])):
            a_i, w, shape, o = args[0][1], args[1][1], tuple(t.shape), outs
            mm, empty = np.matmul, np.empty
            cell: list = [None]  # a planned out buffer, when the result never leaves the method

            def run_mm(v):
                res = cell[0]
                if res is None:
                    res = empty(shape, np.float32)
                mm(v[a_i], w, out=res)
                for oi in o:
                    v[oi] = res
            self._mm[pc] = (a_i, o, shape, cell, (t.shape[0], w.shape[0]))
            return run_mm
        fn = kd.fn
        shape_ok = r._shape_ok
        where = f"method {r.name!r} instruction {pc} ({name})"

        def run_kernel(v):
            xs = [v[x] if k == "s" else x for k, x in args]
            try:
                res = K.cast_to_out(fn(*xs, out=info), info, name, cast)
            except K.KernelError as e:
                raise K.KernelError(f"{where}: {e}") from None
            except QnnrtError:
                raise
            except Exception as e:  # noqa: BLE001 - as the interpreter: bad arguments
                raise K.KernelError(f"{where}: the program gives this operator arguments it "
                                    f"cannot take ({type(e).__name__}: {e})") from None
            if not shape_ok(res.shape, t):
                raise QnnrtError(f"{where}: the result has shape {list(res.shape)} but the "
                                 f"program's out tensor is {list(t.shape)}")
            for oi in outs:
                v[oi] = res
        return run_kernel

    def run(self, inputs) -> dict[str, np.ndarray]:
        from qnnrt.executorch.kernels.dtypes import _astype
        from qnnrt.executorch.program import size1_reshape
        from qnnrt.runtime.method import validate_inputs
        vals = validate_inputs(self.in_specs, inputs, self.where)
        v = self.template.copy()
        given = []
        for i, s in zip(self.in_idx, self.in_specs):
            v[i] = x = vals[s.name]
            given.append(x)
        fast = self._all_live()
        pool = self.program.pool
        if not fast:
            pool.set_order(self.order)
        acc = cpu = 0.0
        pc = time.perf_counter
        position = 0
        for kind, op in self.ops:
            if kind == 0:
                t0 = pc()
                op(v)
                cpu += pc() - t0
            elif kind == 1:
                d, step, order, post, reshape = op
                if d.dyn_ins:
                    xs = [v[x] if k == "s" else x for k, x in order]
                    if reshape:
                        for j, (x, (_, _, shape, _)) in enumerate(zip(xs, d.ins)):
                            if isinstance(x, np.ndarray) and x.shape != shape:
                                xs[j] = size1_reshape(x, shape)
                else:
                    xs = order
                if fast:
                    res, dt_s = d.run(xs, d.handle)
                else:
                    ctx = pool.acquire(step.key, position)
                    try:
                        res, dt_s = d.run(xs, ctx.graph(step.graph).handle)
                    finally:
                        pool.release(step.key, position)
                acc += dt_s
                position += 1
                for oi, p, t in post:
                    a = res[p]
                    if t is not None:
                        if a.dtype != t.dtype:
                            a = _astype(a, t.dtype)
                        if a.shape != tuple(t.shape):
                            if a.size != t.numel:
                                raise QnnrtError(
                                    f"{self.where}: output {p} of graph {step.graph!r} has shape "
                                    f"{list(a.shape)}, the program expects {list(t.shape)}")
                            a = a.reshape(t.shape)
                    v[oi] = a
            elif kind == 2:
                (k, x), to = op
                v[to] = v[x] if k == "s" else x
            else:
                v[op] = None
        self.program.graph_calls += len(self.order)
        tm = self.timing
        tm.accelerator_s, tm.cpu_ops_s, tm.graph_calls = acc, cpu, len(self.order)
        out = {}
        for name, (i, copy) in zip(self.out_names, self.outs):
            x = v[i]
            if isinstance(x, np.ndarray) and (copy or not x.flags.writeable
                                              or any(np.shares_memory(x, g) for g in given)):
                x = np.array(x, copy=True)
            out[name] = x
        return out


class _NotCompilable(Exception):
    pass
