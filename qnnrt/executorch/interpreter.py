"""Interpreter for one ExecuTorch execution plan (a ``.pte`` method).

:class:`PteMethodRunner` executes a method's instruction chain: KernelCalls through the numpy kernels
of :mod:`qnnrt.executorch.kernels`, DelegateCalls through a caller-supplied ``delegate_runner``
(the runtime wires it to QNN contexts), MoveCall, JumpFalseCall and FreeCall as ExecuTorch's
``Method::execute_instruction`` does. Memory planning is ignored: every value gets its own numpy
array, and each one is dropped right after its last use (straight-line programs), so peak memory is
that of the live values only.

DelegateCall args are the delegate's inputs followed by its outputs (ExecuTorch's emitter), but the
program does not record where one ends; the runner finds the split by data flow (inputs are the
leading args already produced or given when the call is reached) unless ``delegate_num_inputs``
says it. Inputs reach ``delegate_runner`` in arg order, which for QNN delegates is the order of the
graph inputs sorted by the number in their names (see :func:`qnnrt.executorch.reader.qnn_graph_io_order`).

:func:`describe_pte` (in :mod:`qnnrt.executorch.describe`) summarises a program for ``qnnrt inspect``.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from qnnrt.errors import FormatError, InputError, QnnrtError
from qnnrt.executorch.instructions import InstructionVisitor, handlers, kind_of, visit
from qnnrt.executorch.reader import (DelegateCall, FreeCall, JumpFalseCall, KernelCall, MoveCall,
                               Instruction, PteIOSpec, PteMethod, TensorInfo)
from qnnrt.executorch import kernels as K
from qnnrt.executorch.analysis import (UNDEFINED, DelegateSplit, MethodAnalysis, References, check_operators,
                                       shape_fits)

__all__ = ["PteMethodRunner", "DelegateRunner"]

DelegateRunner = Callable[[int, list], list]


class PteMethodRunner:
    """Runs one method of a ``.pte`` program.

    Parameters
    ----------
    method:
        A :class:`~qnnrt.executorch.reader.PteMethod` from :func:`~qnnrt.executorch.reader.read_pte`.
    delegate_runner:
        ``delegate_runner(delegate_index, inputs) -> outputs``; called for every DelegateCall with the
        delegate's input arrays (numpy, in DelegateCall arg order) and must return its outputs in
        order. Tensors whose dim order is not the default are passed / expected in their physical
        (dim-ordered) layout, as a delegate reads ExecuTorch memory. May be None only when the
        method has no DelegateCall.
    delegate_num_inputs:
        Optional ``{delegate_index: number of inputs}`` overriding the data-flow split of
        DelegateCall args (e.g. from the QNN graph's input count).
    free_values:
        Drop each intermediate value after its last use (default True).
    """

    def __init__(self, method: PteMethod, delegate_runner: DelegateRunner | None = None, *,
                 delegate_num_inputs: Mapping[int, int] | None = None, free_values: bool = True):
        self.method = method
        self.name = method.name
        self.delegate_runner = delegate_runner
        self.kernel_seconds = 0.0  # time inside CPU kernels (for run timing), reset by the caller
        self._instrs = list(method.instructions)
        values = method.values
        self._values = values
        n = len(values)

        check_operators(method)
        if delegate_runner is None and any(isinstance(i, DelegateCall) for i in self._instrs):
            raise QnnrtError(f"method {method.name!r} has DelegateCalls; PteMethodRunner needs a "
                             "delegate_runner to execute them")

        # static (program-given) values: scalars, lists, constants
        self._static: list[Any] = [UNDEFINED] * n
        self._const_idx: set[int] = set()
        self._mutable_init: dict[int, np.ndarray] = {}
        for i, v in enumerate(values):
            k = v.kind
            if k == "tensor":
                t: TensorInfo = v.value
                if t.is_constant:
                    self._static[i] = method.constant(i)        # zero-copy view, loaded once
                    self._const_idx.add(i)
                elif t.has_initial_data:
                    # mutable state (e.g. a buffer the program updates in place): loaded once,
                    # then it keeps what each run leaves in it, as ExecuTorch's method does
                    self._mutable_init[i] = np.array(method.constant(i), copy=True)
                elif t.numel == 0 and t.dtype is not None:
                    self._static[i] = np.zeros(t.shape, dtype=t.dtype)
            elif k in ("null", "none"):
                self._static[i] = None
            elif k in ("int", "bool", "double", "string"):
                self._static[i] = v.value
            elif k in ("double_list", "bool_list"):
                self._static[i] = list(v.value)
            # int_list / tensor_list / optional_tensor_list are resolved at use time

        self._input_idx = [s.value_index for s in method.inputs]
        self._output_idx = [s.value_index for s in method.outputs]

        # kernels and their arg layout
        self._kernels: dict[int, K.KernelDef] = {}
        for pc, ins in enumerate(self._instrs):
            if isinstance(ins, KernelCall):
                opname = method.operators[ins.op_index].qualified_name
                kd = K.KERNELS[opname]
                if len(ins.args) != kd.n_args + kd.n_out:
                    raise FormatError(
                        f"method {method.name!r} instruction {pc}: {opname} has {len(ins.args)} "
                        f"args, but its schema has {kd.n_args} (out included) and ExecuTorch adds "
                        f"{kd.n_out} returned value(s): {kd.n_args + kd.n_out} expected. The program "
                        "was made for a different operator version.")
                for oi in ins.args[kd.n_inputs:]:
                    if values[oi].kind != "tensor":
                        raise FormatError(f"method {method.name!r} instruction {pc}: {opname}'s out "
                                          f"argument (value {oi}) is a {values[oi].kind}, not a tensor")
                self._kernels[pc] = kd

        self._split = self._plan_delegate_args(dict(delegate_num_inputs or {}))
        self._free_after = self._plan_frees() if free_values else {}
        # per instruction, looked up once: its handler in _Execution, and its trace kind and name
        self._handlers = handlers(_Execution, self._instrs)
        self._trace_names = [(kind_of(ins).trace_kind, kind_of(ins).label(method, ins))
                             for ins in self._instrs]
        self.analysis = MethodAnalysis(
            self.name, tuple(self._instrs), tuple(values), tuple(self._static),
            dict(self._kernels), dict(self._split),
            {k: tuple(v) for k, v in self._free_after.items()}, tuple(self._input_idx),
            tuple(self._output_idx), frozenset(self._const_idx), bool(self._mutable_init))

    # -- planning ---------------------------------------------------------------------------
    def _refs(self, idx: int) -> list[int]:
        """A value and the values it names (list items)."""
        v = self._values[idx]
        if v.kind in ("tensor_list", "int_list"):
            return [idx, *v.value]
        if v.kind == "optional_tensor_list":
            return [idx, *(j for j in v.value if j != -1)]
        return [idx]

    def _instr_refs(self, pc: int, ins: Instruction) -> list[int]:
        """The values instruction `pc` names (list items included)."""
        return visit(References(self._refs), pc, ins)

    def _plan_delegate_args(self, override: dict[int, int]) -> dict[int, int]:
        defined = {i for i, s in enumerate(self._static) if s is not UNDEFINED}
        defined |= {i for i, v in enumerate(self._values) if v.kind != "tensor"}
        defined |= set(self._input_idx) | set(self._mutable_init)
        split = DelegateSplit(self.name, self._kernels, override, defined)
        for k, ins in enumerate(self._instrs):
            visit(split, k, ins)
        return split.split

    def _plan_frees(self) -> dict[int, list[int]]:
        # backward jumps (loops) make "last use" position-dependent: then only FreeCall frees
        for k, ins in enumerate(self._instrs):
            target = kind_of(ins).jump_target(ins)
            if target is not None and target <= k:
                return {}
        keep = set(self._output_idx) | self._const_idx | set(self._mutable_init)
        last: dict[int, int] = {}
        for k, ins in enumerate(self._instrs):
            for r in self._instr_refs(k, ins):
                last[r] = k
        free_after: dict[int, list[int]] = {}
        for v, k in last.items():
            if v in keep or self._values[v].kind != "tensor":
                continue
            free_after.setdefault(k, []).append(v)
        return free_after

    # -- public info ------------------------------------------------------------------------
    @property
    def input_specs(self) -> list[PteIOSpec]:
        return self.method.inputs

    @property
    def output_specs(self) -> list[PteIOSpec]:
        return self.method.outputs

    def delegate_call_order(self) -> list[int]:
        """Delegate indices in the order the chain calls them (repeats included)."""
        return [i.delegate_index for i in self._instrs if isinstance(i, DelegateCall)]

    def context_call_order(self) -> list[tuple[str, int]]:
        """Blob keys (:attr:`PteDelegate.key`, one QNN context each) in call order, repeats included:
        what a residency manager needs to plan loads and evictions across shared contexts."""
        return [self.method.delegates[i].key for i in self.delegate_call_order()]

    def delegate_inputs(self, instruction_index: int) -> tuple[list[int], list[int]]:
        """(input value indices, output value indices) of the DelegateCall at that instruction."""
        ins = self._instrs[instruction_index]
        if not isinstance(ins, DelegateCall):
            raise QnnrtError(f"instruction {instruction_index} is not a DelegateCall")
        n = self._split[instruction_index]
        return list(ins.args[:n]), list(ins.args[n:])

    def delegate_signatures(self) -> dict[int, tuple[list[TensorInfo | None], list[TensorInfo | None]]]:
        """For each delegate index: (input TensorInfos, output TensorInfos) of its first call."""
        out = {}
        for k, ins in enumerate(self._instrs):
            if isinstance(ins, DelegateCall) and ins.delegate_index not in out:
                i, o = self.delegate_inputs(k)
                info = lambda j: self._values[j].value if self._values[j].kind == "tensor" else None
                out[ins.delegate_index] = ([info(j) for j in i], [info(j) for j in o])
        return out

    # -- execution --------------------------------------------------------------------------
    def _prepare_inputs(self, inputs: Sequence[Any] | Mapping[str, Any]) -> dict[int, Any]:
        specs = self.method.inputs
        if isinstance(inputs, Mapping):
            unknown = [k for k in inputs if k not in {s.name for s in specs}]
            if unknown:
                raise InputError(f"method {self.name!r}: unknown input name(s) {unknown}; expected "
                                 f"{[s.name for s in specs]}")
            missing = [s.name for s in specs if s.name not in inputs]
            if missing:
                raise InputError(f"method {self.name!r}: missing input(s) {missing}")
            inputs = [inputs[s.name] for s in specs]
        else:
            inputs = list(inputs)
        if len(inputs) != len(specs):
            raise InputError(f"method {self.name!r} takes {len(specs)} input(s) "
                             f"({', '.join(s.name for s in specs)}), got {len(inputs)}")
        slots: dict[int, Any] = {}
        for spec, x in zip(specs, inputs):
            if spec.kind != "tensor":
                slots[spec.value_index] = x
                continue
            if spec.tensor is None:
                raise QnnrtError(f"method {self.name!r} {spec.name}: is a tensor but the program gives no tensor info; "
                                 "the program is inconsistent")
            t: TensorInfo = spec.tensor
            a = np.asarray(x)
            if t.dtype is not None and a.dtype != t.dtype:
                if not np.can_cast(a.dtype, t.dtype, "same_kind"):
                    raise InputError(f"method {self.name!r} {spec.name}: expected {t.dtype}, got "
                                     f"{a.dtype} (which does not convert without changing kind)")
                a = a.astype(t.dtype)
            if not shape_fits(a.shape, t):
                raise InputError(f"method {self.name!r} {spec.name}: expected shape "
                                 f"{list(t.shape)}{' (upper bound)' if t.shape_dynamism else ''}, "
                                 f"got {list(a.shape)}")
            slots[spec.value_index] = a
        for i, a in self._mutable_init.items():
            slots[i] = a
        return slots


    def run(self, inputs: Sequence[Any] | Mapping[str, Any], *, trace: list | None = None) -> list:
        """Execute the method; returns its outputs (numpy arrays for tensors) in order.

        ``trace``: if a list, one dict per executed instruction is appended:
        ``{"index", "kind", "name", "seconds"}`` (kind: kernel / delegate / move / jump / free).
        """
        slots = self._prepare_inputs(inputs)
        given_inputs = [slots[i] for i in self._input_idx if i in slots]
        static = self._static
        values = self._values
        instrs = self._instrs
        name = self.name

        def get(i: int) -> Any:
            v = slots.get(i, UNDEFINED)
            if v is UNDEFINED:
                v = static[i]
                if v is UNDEFINED:
                    kind = values[i].kind
                    if kind == "int_list":
                        return [int(get(j)) for j in values[i].value]
                    if kind == "tensor_list":
                        return [get(j) for j in values[i].value]
                    if kind == "optional_tensor_list":
                        return [None if j == -1 else get(j) for j in values[i].value]
                    raise QnnrtError(f"method {name!r}: value {i} ({kind}) is used before any "
                                     "instruction produced it; the program is inconsistent")
            return v

        pc = 0
        n = len(instrs)
        timing = trace is not None
        execution = _Execution(self, get, slots)
        step = self._handlers
        while pc < n:
            t0 = time.perf_counter() if timing else 0.0
            nxt = step[pc](execution, pc, instrs[pc])
            for fv in self._free_after.get(pc, ()):
                slots.pop(fv, None)
            if trace is not None:
                kind, label = self._trace_names[pc]
                trace.append({"index": pc, "kind": kind, "name": label,
                              "seconds": time.perf_counter() - t0})
            pc = nxt

        for i in self._mutable_init:  # keep the state this run left for the next one
            if i in slots and isinstance(slots[i], np.ndarray):
                self._mutable_init[i] = slots[i]
        inputs = [x for x in given_inputs if isinstance(x, np.ndarray)]
        outs = []
        for spec in self.method.outputs:
            v = get(spec.value_index)
            if isinstance(v, np.ndarray) and (spec.value_index in self._const_idx or
                                              spec.value_index in self._input_idx or
                                              spec.value_index in self._mutable_init or
                                              not v.flags.writeable or
                                              any(np.shares_memory(v, x) for x in inputs)):
                v = np.array(v, copy=True)  # never hand out the caller's or the program's memory
            outs.append(v)
        return outs

    __call__ = run

    def run_kernel(self, pc: int, ins: KernelCall, get: Callable[[int], Any],
                   slots: dict[int, Any]) -> None:
        """Execute the KernelCall at `pc` of a run (its values read by `get`, written to `slots`)."""
        kd = self._kernels[pc]
        args = ins.args
        n_in = kd.n_inputs
        xs = [get(a) for a in args[:n_in]]
        out_i = args[n_in]
        t: TensorInfo = self._values[out_i].value
        info = K.OutInfo(t.dtype, t.shape)
        try:
            t0 = time.perf_counter()
            r = kd.fn(*xs, out=info)
            r = K.cast_to_out(r, info, kd.name, kd.cast)
            self.kernel_seconds += time.perf_counter() - t0
        except K.KernelError as e:
            raise K.KernelError(f"method {self.name!r} instruction {pc} ({kd.name}): {e}") from None
        except QnnrtError:
            raise
        except Exception as e:  # noqa: BLE001 - numpy's AxisError, ValueError ... on bad arguments
            shapes = [list(x.shape) if isinstance(x, np.ndarray) else x for x in xs]
            raise K.KernelError(
                f"method {self.name!r} instruction {pc} ({kd.name}): the program gives this operator "
                f"arguments it cannot take ({type(e).__name__}: {e}; arguments {shapes!r:.300}). The "
                f".pte is malformed or uses the operator in a way qnnrt does not support; re-export "
                f"it.") from None
        if not shape_fits(r.shape, t):
            raise QnnrtError(f"method {self.name!r} instruction {pc} ({kd.name}): the result has "
                             f"shape {list(r.shape)} but the program's out tensor (value {out_i}) "
                             f"is {list(t.shape)}")
        for o in args[n_in:]:
            slots[o] = r

    def _physical(self, idx: int, x: Any) -> Any:
        """A tensor in the memory layout its dim order describes (what a delegate reads)."""
        v = self._values[idx]
        if v.kind == "tensor" and isinstance(x, np.ndarray):
            t: TensorInfo = v.value
            if len(t.dim_order) == x.ndim and not t.is_contiguous_order:
                return np.ascontiguousarray(np.transpose(x, t.dim_order))
        return x

    def run_delegate(self, pc: int, ins: DelegateCall, get: Callable[[int], Any],
                     slots: dict[int, Any]) -> None:
        """Execute the DelegateCall at `pc` of a run through the delegate_runner."""
        n_in = self._split[pc]
        args = ins.args
        xs = [self._physical(a, get(a)) for a in args[:n_in]]
        if self.delegate_runner is None:  # __init__ refuses programs with delegates and no runner
            raise QnnrtError(f"method {self.name!r} instruction {pc}: no delegate_runner")
        res = self.delegate_runner(ins.delegate_index, xs)
        out_idx = args[n_in:]
        res = list(res) if res is not None else []
        if len(res) != len(out_idx):
            raise QnnrtError(f"method {self.name!r} instruction {pc}: delegate {ins.delegate_index} "
                             f"returned {len(res)} output(s), the program expects {len(out_idx)}")
        for j, (o, r) in enumerate(zip(out_idx, res)):
            v = self._values[o]
            if v.kind != "tensor":
                slots[o] = r
                continue
            t: TensorInfo = v.value
            a = np.asarray(r)
            if t.dtype is not None and a.dtype != t.dtype:
                a = K.astype(a, t.dtype)
            if len(t.dim_order) == len(t.shape) and not t.is_contiguous_order:
                phys = tuple(t.shape[d] for d in t.dim_order)
                if a.size == t.numel:      # the delegate wrote the physical layout
                    a = a.reshape(phys).transpose(np.argsort(t.dim_order))
            if not shape_fits(a.shape, t):
                if t.shape_dynamism == 0 and a.size == t.numel:
                    a = a.reshape(t.shape)
                else:
                    raise QnnrtError(
                        f"method {self.name!r} instruction {pc}: output {j} of delegate "
                        f"{ins.delegate_index} has shape {list(a.shape)}, the program expects "
                        f"{list(t.shape)} (value {o})")
            slots[o] = a


class _Execution(InstructionVisitor[int]):
    """One run of a PteMethodRunner: each handler executes its instruction as ExecuTorch's
    ``Method::execute_instruction`` does and returns the next instruction's index."""
    __slots__ = ("runner", "get", "slots")

    def __init__(self, runner: PteMethodRunner, get: Callable[[int], Any],
                 slots: dict[int, Any]) -> None:
        self.runner, self.get, self.slots = runner, get, slots

    def kernel(self, pc: int, ins: KernelCall) -> int:
        self.runner.run_kernel(pc, ins, self.get, self.slots)
        return pc + 1

    def delegate(self, pc: int, ins: DelegateCall) -> int:
        self.runner.run_delegate(pc, ins, self.get, self.slots)
        return pc + 1

    def move(self, pc: int, ins: MoveCall) -> int:
        self.slots[ins.move_to] = self.get(ins.move_from)
        return pc + 1

    def jump_false(self, pc: int, ins: JumpFalseCall) -> int:
        cond = self.get(ins.cond_value_index)
        if isinstance(cond, np.ndarray):
            if cond.dtype != np.bool_:
                raise QnnrtError(f"method {self.runner.name!r} instruction {pc}: jump condition is "
                                 f"a {cond.dtype} tensor, expected bool")
            ok = bool(np.all(cond))
        else:
            ok = bool(cond)
        return pc + 1 if ok else ins.destination_instruction

    def free(self, pc: int, ins: FreeCall) -> int:
        self.slots.pop(ins.value_index, None)
        return pc + 1
