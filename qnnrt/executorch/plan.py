"""A .pte method compiled at load for the runtime's fast path (runtime/plan.py): instructions over
a slot list, kernels as bound closures, delegates through prepared graph steps."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from qnnrt.errors import QnnError, QnnrtError
from qnnrt.runtime.plan import DelegatePlan, NotCompilable

if TYPE_CHECKING:
    from qnnrt.runtime.program import Program


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
        except NotCompilable:
            return DelegatePlan(program, method)

    def __init__(self, program: "Program", method):
        super().__init__(program, method)
        from qnnrt.executorch.interpreter import _UNDEF, DelegateCall, FreeCall, KernelCall, MoveCall
        from qnnrt.executorch import kernels as K
        r = method._runner
        if r._mutable_init:
            raise NotCompilable
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
                raise NotCompilable
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
            raise NotCompilable

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
                    raise NotCompilable
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
                        raise NotCompilable
                src = [arg(a) for a in a_in]
                order: list[Any] = [None] * len(step.inputs)
                for p, s in zip(in_pos, src):
                    order[p] = s
                if any(o is None for o in order) or len(out_pos) != len(a_out):
                    raise NotCompilable
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
                raise NotCompilable
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
        program = self.program
        pool = program.pool
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
                program.graph_calls += 1  # as they happen: progress lines read it
                if fast:
                    try:
                        res, dt_s = d.run(xs, d.handle)
                    except QnnError as e:
                        res, dt_s = self._rerun(step.key, step.graph, e, True, d.run, xs)
                else:
                    ctx = pool.acquire(step.key, position)
                    try:
                        try:
                            res, dt_s = d.run(xs, ctx.graph(step.graph).handle)
                        except QnnError as e:
                            res, dt_s = self._rerun(step.key, step.graph, e, False, d.run, xs)
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
