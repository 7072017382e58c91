"""ExecuTorch .pte programs on qnnrt's runtime: each execution plan becomes a Method whose
DelegateCalls run QNN graphs through the program's context pool (so residency, profiling and the
runner work the same as for qnnrt's own programs)."""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from qnnrt.core import ContextBinary, QnnLibrary
from qnnrt.core.binary import GraphSpec
from qnnrt.errors import FormatError, QnnrtError
from qnnrt.executorch.reader import (PteIOSpec, PteMethod, PteProgram, constant_method_value,
                                     is_constant_method,
                                     parse_qnn_compile_spec, qnn_context_binary, qnn_graph_io_order,
                                     read_pte)
from qnnrt.runtime.method import Method, MethodBuilder, UnavailableMethod
from qnnrt.runtime.method_spec import GraphRunner, Inputs, IOSpec, QnnStep, validate_inputs
from qnnrt.executorch.delegates import DelegateSite, size1_reshape
from qnnrt.executorch.interpreter import PteMethodRunner
from qnnrt.executorch.plan import PreparedPte, pte_plan
from qnnrt.executorch import portable  # noqa: F401  (the plan's steps as descriptors a PD worker rebuilds)
from qnnrt.executorch.compile_spec import runtime_options

if TYPE_CHECKING:
    from qnnrt.runtime.plan import CallerArrays, Plan, PreparedRun
    from qnnrt.runtime.plan_context import PlanContext


def context_key(blob_key: tuple[str, int]) -> str:
    """Pool key of a delegate blob: one context per blob, shared by every method using it."""
    return f"{blob_key[0]}:{blob_key[1]}"


def _iospecs(specs: Sequence[PteIOSpec], method: str, what: str) -> list[IOSpec]:
    out = []
    for s in specs:
        if s.kind != "tensor" or s.dtype is None:
            raise FormatError(f"method {method!r} has a non-tensor {what} {s.name!r} ({s.kind}); "
                              f"qnnrt runs methods whose inputs and outputs are tensors")
        out.append(IOSpec(s.name, tuple(s.shape or ()), np.dtype(s.dtype)))
    return out


def _graph_for(binary: ContextBinary, name: str) -> GraphSpec:
    """ExecuTorch runs the graph named after the method; a binary with a single graph of another
    name (e.g. one qnnrt or ORT compiled) runs that graph."""
    if len(binary.graphs) == 1 and binary.graphs[0].name != name:
        return binary.graphs[0]
    return binary.graph(name)


class PteMethodAdapter(Method):
    """One .pte execution plan: CPU kernels in numpy, DelegateCalls through QNN graphs."""

    def __init__(self, method: PteMethod, binaries: dict[str, ContextBinary]):
        self.name = method.name
        self.inputs = _iospecs(method.inputs, method.name, "input")
        self.outputs = _iospecs(method.outputs, method.name, "output")
        self.runner = PteMethodRunner(method, self._delegate)
        signatures = self.runner.delegate_signatures()
        self.delegates: dict[int, DelegateSite] = {}   # by delegate index
        for i in set(self.runner.delegate_call_order()):
            d = method.delegates[i]
            key = context_key(d.key)
            spec = _graph_for(binaries[key], method.graph_name(i))
            mutable = [t.name for t in spec.inputs + spec.outputs if "mutbuf_" in t.name]
            if mutable:
                raise FormatError(
                    f"method {method.name!r}, delegate {i}: graph {spec.name!r} uses ExecuTorch "
                    f"mutable buffers ({', '.join(mutable[:4])}), state the QNN delegate keeps "
                    f"between calls; qnnrt does not run those yet. Export with the state as "
                    f"explicit graph inputs/outputs (e.g. the KV cache as I/O).")
            in_pos, out_pos = qnn_graph_io_order([t.name for t in spec.inputs],
                                                 [t.name for t in spec.outputs])
            values = signatures.get(i, ([], []))[1]
            # fixed-point graph outputs are dequantized unless their .pte value is an integer tensor
            dequant = [True] * len(spec.outputs)
            for k, p in enumerate(out_pos):
                t = values[k] if k < len(values) else None
                if t is not None and t.dtype is not None and t.dtype.kind in "iu":
                    dequant[p] = False
            step = QnnStep(key, spec.name, [t.name for t in spec.inputs],
                           [t.name for t in spec.outputs], tuple(dequant))
            self.delegates[i] = DelegateSite(step, tuple(in_pos), tuple(out_pos),
                                             tuple(tuple(spec.inputs[p].shape) for p in in_pos))
        self.steps = [self.delegates[i].step for i in self.runner.delegate_call_order()]
        self._run_graph: GraphRunner | None = None
        self._position = 0

    def plan(self, context: PlanContext) -> Plan:
        """Compiled to named steps when it is straight-line and static (executorch/plan.py), else
        the interpreter with prepared delegate calls."""
        return pte_plan(context, self)

    def prepare(self, context: PlanContext, arrays: CallerArrays) -> PreparedRun:
        """The compiled plan bound once to the caller's arrays (executorch/plan.py `PreparedPte`)."""
        return PreparedPte(context, self, arrays)

    def _delegate(self, index: int, xs: Sequence[np.ndarray]) -> list[np.ndarray]:
        site = self.delegates[index]
        ordered: list[np.ndarray] = [np.empty(0)] * len(site.step.inputs)
        for p, x, want in zip(site.input_positions, xs, site.input_shapes):
            if x.shape != want:
                x = size1_reshape(x, want)
            ordered[p] = x if x.flags.c_contiguous else x.copy(order="C")
        if self._run_graph is None:
            raise QnnrtError(f"method {self.name!r}: delegate {index} called outside run()")
        outs = self._run_graph(site.step, self._position, ordered)
        self._position += 1
        return [outs[p] for p in site.output_positions]

    def run(self, inputs: Inputs, run_graph: GraphRunner) -> dict[str, np.ndarray]:
        """The interpreter over validated inputs, each delegate through `run_graph`."""
        values = validate_inputs(self.inputs, inputs, f"method {self.name!r}")
        self._run_graph, self._position = run_graph, 0
        try:
            outs = self.runner.run([values[s.name] for s in self.inputs])
        finally:
            self._run_graph = None
        return {s.name: o for s, o in zip(self.outputs, outs)}


def pte_runtime_options(prog: PteProgram) -> dict:
    """What the .pte's QNN delegates ask of the runtime (compile_spec.RUNTIME_FIELDS), merged."""
    specs = [parse_qnn_compile_spec(d) for users in prog.unique_delegate_blobs().values()
             for d in users[:1]]
    return runtime_options(specs)


def pte_methods(path: Path, lib: QnnLibrary | None) -> tuple[
        dict[str, ContextBinary], MethodBuilder, str | None, PteProgram,
        dict[str, object]]:
    """(binaries by pool key, method builder, target SoC, the open PteProgram to close last,
    constant-method values by name)."""
    prog = read_pte(path, require_qnn=True)
    constants = {name: constant_method_value(m) for name, m in prog.methods.items()
                 if is_constant_method(m)}
    with contextlib.ExitStack() as undo:
        undo.callback(prog.close)
        binaries: dict[str, ContextBinary] = {}
        soc = None
        for blob_key, users in prog.unique_delegate_blobs().items():
            key = context_key(blob_key)
            blob = qnn_context_binary(users[0])
            binaries[key] = ContextBinary(buffer=blob, name=f"{path.name}:{key}", lib=lib,
                                          origin=prog.origin_of(blob))
            soc = soc or parse_qnn_compile_spec(users[0]).get("soc_model")
        undo.pop_all()

    def build() -> dict[str, Method]:
        """Every method that is not a constant; one that cannot run says why when it is run."""
        methods: dict[str, Method] = {}
        for name, m in prog.methods.items():
            if name in constants:
                continue
            try:
                methods[name] = PteMethodAdapter(m, binaries)
            except FormatError as e:
                methods[name] = UnavailableMethod(name, str(e))
        return methods
    return binaries, build, soc, prog, constants
