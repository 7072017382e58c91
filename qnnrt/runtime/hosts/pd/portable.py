"""Steps as descriptors: what a PD worker needs to rebuild a plan segment's step, as typed data on
the wire (runtime/ipc/wire.py), not as pickled step objects.

A step type that can run in another host registers here (`register`) a descriptor dataclass, how to
describe a step as one and how to rebuild the step from it. Arrays a descriptor holds are
`ArrayRef`s: a planned buffer in the shared arena by reference (`ArenaArray`, the same memory on
both sides), anything else by value; a bound call travels as its id. The worker rebuilds a step by
its kind's registered name, "module:Descriptor": the module (under qnnrt only) is imported first,
so the .pte layer's steps (executorch/portable.py) register without the runtime naming them.
This module registers the runtime's own: the graph step and a bound ONNX Runtime segment.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from qnnrt.core import GraphSpec
from qnnrt.core.binding import BindingLayout, GraphBinding, InputAdapter
from qnnrt.core.call import PreparedCall
from qnnrt.runtime.ipc.child import ProtocolError
from qnnrt.runtime.ort_step import OrtStep, PortableOrtStep
from qnnrt.runtime.hosts.pd.channel import Arena, ArenaView, Block
from qnnrt.runtime.steps import GraphStep, Step
from qnnrt.runtime.ipc.wire import Wire

@dataclass(frozen=True)
class ArenaArray:
    """An array in the shared arena, by reference."""
    block: Block
    shape: tuple[int, ...]
    dtype: str


ArrayRef = ArenaArray | np.ndarray


@dataclass(frozen=True)
class StepDescriptor:
    """One step of a segment: its kind's registered name and its descriptor on the wire."""
    kind: str
    body: bytes


class Refs:
    """The main process's side: arrays as references where they live in the arena, calls by id."""

    def __init__(self, arena: Arena, call_id_of: Callable[[object], int | None]) -> None:
        self.arena, self._call_id_of = arena, call_id_of

    def array(self, a: np.ndarray) -> ArrayRef:
        block = self.arena.block_of(a) if a.nbytes else None
        return a if block is None else ArenaArray(block, tuple(a.shape), a.dtype.str)

    def call(self, call: object) -> int:
        call_id = self._call_id_of(call)
        if call_id is None:
            raise ProtocolError(f"a plan segment's graph call is a {type(call).__name__}, not a "
                                f"call its worker bound")
        return call_id


class Resolver:
    """The worker's side: references to its view of the arena (one array per reference, so a
    buffer two steps share is one array here too), call ids to its calls and their specs."""

    def __init__(self, view: ArenaView, call: Callable[[int], PreparedCall],
                 spec: Callable[[int], GraphSpec]) -> None:
        self.view, self.call, self.spec = view, call, spec
        self._arrays: dict[tuple, np.ndarray] = {}

    def array(self, ref: ArrayRef) -> np.ndarray:
        if isinstance(ref, np.ndarray):
            return ref
        key = (ref.block, ref.shape, ref.dtype)
        a = self._arrays.get(key)
        if a is None:
            a = self._arrays[key] = self.view.array(ref.block, ref.shape, np.dtype(ref.dtype))
        return a


@dataclass(frozen=True)
class _Kind:
    name: str
    descriptor: type
    describe: Callable[[Any, Refs], object]
    rebuild: Callable[[Any, Resolver], Step]
    wire: Wire


_BY_STEP: dict[type, _Kind] = {}
_BY_NAME: dict[str, _Kind] = {}
T = TypeVar("T")
_ADAPTERS: dict[str, type] = {}
_ADAPTER_NAMES: dict[type, str] = {}


def register(step_type: type, descriptor: type, describe: Callable[[Any, Refs], object],
             rebuild: Callable[[Any, Resolver], Step]) -> None:
    """Steps of `step_type` travel as `descriptor`s (a frozen dataclass of typed fields)."""
    name = f"{descriptor.__module__}:{descriptor.__qualname__}"
    kind = _Kind(name, descriptor, describe, rebuild, Wire([descriptor]))
    _BY_STEP[step_type] = _BY_NAME[name] = kind


def register_adapter(adapter: type, module: str) -> None:
    """Graph input adapters of this class (a dataclass of the input's spec and where) may travel:
    the worker makes one over its own spec of that input. `module`: the registering module, which
    the worker imports to learn the adapter."""
    name = f"{module}:{adapter.__qualname__}"
    _ADAPTERS[name] = adapter
    _ADAPTER_NAMES[adapter] = name


def descriptors() -> list[type]:
    """The descriptor classes registered so far."""
    return [k.descriptor for k in _BY_NAME.values()]


def describe(step: Step, refs: Refs) -> StepDescriptor:
    kind = _BY_STEP.get(type(step))
    if kind is None:
        raise ProtocolError(f"a {type(step).__name__} cannot run in another host")
    return StepDescriptor(kind.name, kind.wire.dumps(kind.describe(step, refs)))


def rebuild(d: StepDescriptor, resolver: Resolver) -> Step:
    kind = _kind(d.kind)
    return kind.rebuild(kind.wire.loads(d.body, kind.descriptor), resolver)


def _registered(table: dict[str, T], name: str, what: str) -> T:
    """`name` in a registry, its module imported first (qnnrt's own modules only: a worker learns
    a kind by the module that registers it)."""
    module = name.partition(":")[0]
    if name not in table and module.startswith("qnnrt."):
        importlib.import_module(module)
    found = table.get(name)
    if found is None:
        raise ProtocolError(f"{what} {name!r}, which this worker does not know")
    return found


def _kind(name: str) -> _Kind:
    return _registered(_BY_NAME, name, "a plan segment's step of kind")


def _adapter_name(adapter: InputAdapter) -> str:
    name = _ADAPTER_NAMES.get(type(adapter))
    if name is None:
        raise ProtocolError(f"a graph input adapter {type(adapter).__name__} that cannot travel")
    return name


def _adapter(name: str, spec: GraphSpec, i: int, where: str) -> InputAdapter:
    cls = _registered(_ADAPTERS, name, "a graph input adapter")
    adapter: InputAdapter = cls(spec.inputs[i], where)
    return adapter


# -- the graph step -----------------------------------------------------------------------------
@dataclass(frozen=True)
class GraphStepDescriptor:
    """A graph step: which call of the worker it makes, and its binder's plan."""
    key: str
    graph: str
    position: int
    call: int
    in_slots: tuple[int, ...]
    out_slots: tuple[int, ...]
    dequantized: tuple[bool, ...]
    where: str
    trusted: tuple[int, ...]
    bound_inputs: dict[int, ArrayRef]
    bound_outputs: dict[int, ArrayRef]
    adapters: dict[int, str]


def _describe_graph(step: GraphStep, refs: Refs) -> GraphStepDescriptor:
    b = step.binding
    lay = b.layout()
    return GraphStepDescriptor(step.key, step.graph, step.position, refs.call(b.call), lay.in_slots,
                               lay.out_slots, lay.dequantized, lay.where, lay.trusted,
                               {i: refs.array(a) for i, a in lay.bound_inputs.items()},
                               {j: refs.array(a) for j, a in lay.bound_outputs.items()},
                               {i: _adapter_name(a) for i, a in lay.adapters.items()})


def _rebuild_graph(d: GraphStepDescriptor, r: Resolver) -> GraphStep:
    spec = r.spec(d.call)
    layout = BindingLayout(d.in_slots, d.out_slots, d.dequantized, d.where, d.trusted,
                           {i: r.array(a) for i, a in d.bound_inputs.items()},
                           {j: r.array(a) for j, a in d.bound_outputs.items()},
                           {i: _adapter(n, spec, i, d.where) for i, n in d.adapters.items()})
    return GraphStep(d.key, d.graph, d.position, GraphBinding.from_layout(r.call(d.call), spec, layout))


register(GraphStep, GraphStepDescriptor, _describe_graph, _rebuild_graph)


# -- a bound ONNX Runtime segment -----------------------------------------------------------------
@dataclass(frozen=True)
class OrtStepDescriptor:
    """A bound CPU segment: its model's bytes and the buffers its binding is over."""
    model: bytes
    in_slots: tuple[int, ...]
    out_slots: tuple[int, ...]
    copy_in: tuple[tuple[ArrayRef, int], ...]     # (buffer, slot) copied in before a run
    copy_out: tuple[tuple[ArrayRef, int], ...]    # (buffer, slot) copied out after it
    inputs: tuple[tuple[str, ArrayRef], ...]      # the binding's inputs, by name
    outputs: tuple[tuple[str, ArrayRef], ...]
    label: str


def _describe_ort(step: PortableOrtStep, refs: Refs) -> OrtStepDescriptor:
    s = step.step
    return OrtStepDescriptor(step.model, tuple(s.in_slots), tuple(s.out_slots),
                             tuple((refs.array(b), slot) for b, slot in s.copy_in),
                             tuple((refs.array(b), slot) for b, slot in s.copy_out),
                             tuple((n, refs.array(b)) for n, b in s.bound_inputs),
                             tuple((n, refs.array(b)) for n, b in s.bound_outputs), s.label)


def _rebuild_ort(d: OrtStepDescriptor, r: Resolver) -> PortableOrtStep:
    from qnnrt.runtime.cpu_segment import open_session
    step = OrtStep.bound_over(open_session(d.model), list(d.in_slots), list(d.out_slots),
                              [(r.array(b), slot) for b, slot in d.copy_in],
                              [(r.array(b), slot) for b, slot in d.copy_out],
                              [(n, r.array(b)) for n, b in d.inputs],
                              [(n, r.array(b)) for n, b in d.outputs], d.label)
    return PortableOrtStep(step, d.model)


register(PortableOrtStep, OrtStepDescriptor, _describe_ort, _rebuild_ort)
