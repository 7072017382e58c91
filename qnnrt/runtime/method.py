"""Methods: what a program can run. A method is a static sequence of steps (QNN graph calls and CPU
segments) over named tensors; its graph call order is known ahead, which the residency policy uses."""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from qnnrt.core import ContextBinary
from qnnrt.core.binary import GraphSpec
from qnnrt.core.tensor import TensorSpec
from qnnrt.errors import FormatError
from qnnrt.formats.epcontext import EPContextModel, EPContextNode, is_epcontext
from qnnrt.formats.onnx_graph import Dims, node_reads, tensor_type
from qnnrt.runtime.cpu_segment import CpuSegment
from qnnrt.runtime.method_spec import CpuStep, GraphRunner, Inputs, IOSpec, QnnStep, validate_inputs
from qnnrt.runtime.plan import MethodPlan, NotPreparable

if TYPE_CHECKING:
    from qnnrt.runtime.plan import CallerArrays, Plan, PreparedRun
    from qnnrt.runtime.plan_context import PlanContext


class Method:
    """Base: `inputs`, `outputs` (IOSpec lists), `graph_order` (context keys in call order),
    `constants` (method outputs that are model constants), and `plan`, how a Program runs it."""
    name: str
    inputs: list[IOSpec]
    outputs: list[IOSpec]
    steps: list
    constants: Mapping[str, np.ndarray] = MappingProxyType({})

    def plan(self, context: PlanContext) -> Plan:
        """The plan a program runs this method with (runtime/plan.py), built at its first run
        with the program's `PlanContext`."""
        return MethodPlan(context, self)

    def prepare(self, context: PlanContext, arrays: CallerArrays) -> PreparedRun:
        """This method's plan bound once to `arrays` (runtime/plan.py `PreparedRun`); only the
        .pte methods the planner compiles can be (NotPreparable otherwise)."""
        raise NotPreparable(f"method {self.name!r} ({type(self).__name__}) cannot be bound to "
                            f"caller arrays: run it with Program.run")

    @property
    def graph_order(self) -> list[str]:
        return [s.key for s in self.steps if isinstance(s, QnnStep)]

    @property
    def graph_calls(self) -> list[QnnStep]:
        return [s for s in self.steps if isinstance(s, QnnStep)]

    def run(self, inputs: Inputs, run_graph: GraphRunner) -> dict[str, np.ndarray]:
        values = validate_inputs(self.inputs, inputs, f"method {self.name!r}")
        values.update(self.constants)
        keep = {o.name for o in self.outputs}
        position = 0
        for i, step in enumerate(self.steps):
            if isinstance(step, QnnStep):
                outs = run_graph(step, position, [values[n] for n in step.inputs])
                values.update(zip(step.outputs, outs))
                position += 1
            else:
                values.update(step.segment.run(values))
            for name in self._dead_after[i]:
                if name not in keep:
                    values.pop(name, None)
        names = {s.name for s in self.inputs}
        return {o.name: (values[o.name].copy() if o.name in names else values[o.name])
                for o in self.outputs}

    def _check_dataflow(self) -> None:
        """Every tensor a step reads and every method output is a method input, a constant or the
        output of an earlier step (a model naming a tensor it does not have is a FormatError here,
        not a KeyError in the middle of a run)."""
        have = {s.name for s in self.inputs} | set(self.constants)
        for i, step in enumerate(self.steps):
            ins = step.inputs if isinstance(step, QnnStep) else step.segment.inputs
            missing = [n for n in ins if n and n not in have]
            if missing:
                what = f"graph call {step.graph!r}" if isinstance(step, QnnStep) else "a CPU segment"
                raise FormatError(f"method {self.name!r}: step {i} ({what}) reads tensor(s) "
                                  f"{missing[:5]} that no input, initializer or earlier node provides; "
                                  f"the model is malformed. Re-export or rebuild it.")
            outs = step.outputs if isinstance(step, QnnStep) else step.segment.outputs
            have.update(outs)
        missing = [o.name for o in self.outputs if o.name not in have]
        if missing:
            raise FormatError(f"method {self.name!r}: output(s) {missing[:5]} are produced by no node; "
                              f"the model is malformed. Re-export or rebuild it.")

    def _plan_lifetimes(self) -> None:
        """Which tensors die after each step, so intermediates are freed as soon as possible."""
        self._check_dataflow()
        last: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            ins = step.inputs if isinstance(step, QnnStep) else step.segment.inputs
            for n in ins:
                last[n] = i
        self._dead_after: list[list[str]] = [[] for _ in self.steps]
        for n, i in last.items():
            self._dead_after[i].append(n)

    def describe(self) -> dict:
        return {"name": self.name, "inputs": [s.to_dict() for s in self.inputs],
                "outputs": [s.to_dict() for s in self.outputs],
                "graph_calls": len(self.graph_calls),
                "cpu_segments": sum(1 for s in self.steps if isinstance(s, CpuStep))}


# makes a program's methods; called once, after the binaries were vetted (it may read their info)
MethodBuilder = Callable[[], dict[str, Method]]


class UnavailableMethod(Method):
    """A method the program holds but qnnrt cannot run; it says why only when it is run, so the
    program's other methods stay usable."""

    def __init__(self, name: str, reason: str):
        self.name, self.reason = name, reason
        self.inputs, self.outputs, self.steps = [], [], []
        self._dead_after = []

    def run(self, inputs: Inputs, run_graph: GraphRunner) -> dict[str, np.ndarray]:
        raise FormatError(self.reason)

    def plan(self, context: PlanContext) -> Plan:
        raise FormatError(self.reason)

    def prepare(self, context: PlanContext, arrays: CallerArrays) -> PreparedRun:
        raise FormatError(self.reason)

    def describe(self) -> dict:
        return {"name": self.name, "unavailable": self.reason}


def _numpy_of(elem_type: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def _elem_of(dtype: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _vi_type(vi: onnx.ValueInfoProto) -> tuple[int, Dims | None] | None:
    return tensor_type(vi.type)


def _iospec(name: str, t: tuple[int, Dims | None] | None, where: str) -> IOSpec:
    if t is None:
        raise FormatError(f"{where}: tensor {name!r} has no type information")
    elem, dims = t
    shape = tuple(d if isinstance(d, int) and d > 0 else None for d in (dims or []))
    return IOSpec(name, shape, _numpy_of(elem))


class OnnxMethod(Method):
    """A method read from an EPContext model: EPContext nodes are QNN steps, runs of other nodes
    are CPU segments. `binary_key(node)` gives the pool key of a node's context binary."""

    def __init__(self, name: str, em: EPContextModel, binaries: dict[str, ContextBinary],
                 key_of: Callable, where: str | None = None):
        self.name = name
        where = where or str(em.path)
        g = em.graph
        init_names = {t.name for t in g.initializer}
        types: dict[str, tuple[int, Dims | None]] = {}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            vt = _vi_type(vi)
            if vt:
                types.setdefault(vi.name, vt)
        declared = dict(types)
        self.inputs = [_iospec(vi.name, types.get(vi.name), where) for vi in g.input
                       if vi.name not in init_names]
        by_index = {n.index: n for n in em.epcontext_nodes}
        # which tensors are consumed after each node (to decide segment outputs)
        consumers: dict[str, int] = {}
        for i, node in enumerate(g.node):
            for t in node_reads(node):
                consumers[t] = i
        graph_outputs = {o.name for o in g.output}
        self.steps = []
        pending: list[tuple[int, onnx.NodeProto]] = []

        def flush() -> None:
            if not pending:
                return
            nodes = [n for _, n in pending]
            produced = {o for n in nodes for o in n.output}
            first, last_i = pending[0][0], pending[-1][0]
            seg_in, seen = [], set()
            for n in nodes:
                for t in node_reads(n):  # incl. what If / Loop bodies read from this graph
                    if t and t not in produced and t not in init_names and t not in seen:
                        seen.add(t)
                        seg_in.append(t)
            seg_out = [o for n in nodes for o in n.output
                       if o and (o in graph_outputs or consumers.get(o, -1) > last_i)]
            seg = CpuSegment(f"{name}_cpu_{len(self.steps)}", g, nodes, seg_in, seg_out, types,
                             em.model.opset_import, em.model.ir_version,
                             f"{where} (CPU nodes {first}..{last_i})")
            for o, ot in seg.output_types.items():
                types.setdefault(o, ot)
            self.steps.append(CpuStep(seg))
            pending.clear()

        for i, node in enumerate(g.node):
            if not is_epcontext(node):
                pending.append((i, node))
                continue
            flush()
            ep = by_index[i]
            key = key_of(ep)
            self.steps.append(self._qnn_step(key, ep, binaries[key].graph(ep.graph_name), declared,
                                             types, f"{where}: EPContext node {ep.name!r}"))
        flush()
        # graph outputs that are initializers (constants) come straight from the model
        self.constants = {t.name: numpy_helper.to_array(t) for t in g.initializer
                          if t.name in graph_outputs}
        for name, arr in self.constants.items():
            types.setdefault(name, (_elem_of(arr.dtype), list(arr.shape)))
        self.outputs = [_iospec(o.name, types.get(o.name), where) for o in g.output]
        self._plan_lifetimes()

    @classmethod
    def _qnn_step(cls, key: str, ep: EPContextNode, spec: GraphSpec,
                  declared: dict[str, tuple[int, Dims | None]], types: dict[str, tuple[int, Dims | None]],
                  where: str) -> QnnStep:
        """The QNN step of one EPContext node; records its tensors' types in `types` (what the CPU
        segments after it are typed from)."""
        ins = cls._match(ep.inputs, spec.inputs, where, "inputs")
        outs = cls._match(ep.outputs, spec.outputs, where, "outputs")
        dequant = []  # per output: floats unless the model declares the integer type
        for tname, ts in zip(outs, spec.outputs):
            want = declared.get(tname)
            deq = not (ts.is_fixed_point and want and _numpy_of(want[0]).kind != "f")
            dequant.append(deq)
            out_dtype = (np.dtype(np.float32) if ts.is_fixed_point and deq else ts.dtype)
            types.setdefault(tname, (_elem_of(out_dtype), list(ts.shape)))
        for tname, ts in zip(ins, spec.inputs):
            types.setdefault(tname, (_elem_of(ts.dtype), list(ts.shape)))
        return QnnStep(key, ep.graph_name, ins, outs, tuple(dequant))

    @staticmethod
    def _match(names: list[str], specs: tuple[TensorSpec, ...], where: str, what: str) -> list[str]:
        """Tensor names of the node in the graph's order (by name when they agree, else by position)."""
        names = [n for n in names if n]
        if len(names) != len(specs):
            raise FormatError(f"{where} has {len(names)} {what} but its QNN graph has "
                              f"{len(specs)} ({[s.name for s in specs]})")
        if set(names) == {s.name for s in specs}:
            return [s.name for s in specs]
        return names


class GraphMethod(Method):
    """A method that is one graph of a raw context binary (`qnnrt run model.bin --graph G`)."""

    def __init__(self, key: str, spec: GraphSpec, name: str | None = None) -> None:
        self.name = name or spec.name
        self.inputs = [IOSpec(s.name, s.shape, s.dtype, s) for s in spec.inputs]
        self.outputs = [IOSpec(s.name, s.shape,
                               np.dtype(np.float32) if s.is_fixed_point else s.dtype)
                        for s in spec.outputs]
        self.steps = [QnnStep(key, spec.name, [s.name for s in spec.inputs],
                              [s.name for s in spec.outputs], True)]
        self._plan_lifetimes()
