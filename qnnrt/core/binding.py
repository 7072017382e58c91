"""Graph execution: one prepared C call (`BoundCall`), one binder over it (`GraphBinding`), and
`Graph`, a graph retrieved from a live context, whose checked `execute` runs through that binder.

How a graph call is made, for every caller (a program's plan, a .pte delegate, a core user):
1. `GraphBinding` is built once per call site from the graph's spec: it owns a `BoundCall` (the
   Qnn_Tensor_t arrays and the graphExecute arguments, made once) and decides, per input and output,
   what happens at each call: bound once to a planned buffer, pointed at the array in a slot, or
   checked (and converted) first; outputs into planned buffers, fresh arrays, or a raw buffer that is
   dequantized in one float32 pass.
2. `GraphBinding.run(values)` reads its inputs from and writes its outputs to `values` (a list indexed
   by slot), then makes the one C call: nothing else is allocated or decided per call.
3. A profiler is attached, not a second path: `GraphBinding.attach_profile` gives the call a QNN
   profile handle and a callback for the events after each call; `GraphBinding.observe` a callback
   for each call's end, its seconds inside graphExecute and those events (the tracer).
4. Shared buffers are bound, not a second path either: a binder given a `SharedMemory` binds every
   tensor to rpcmem, planned buffers made there as they are, the rest to staging arrays made there
   (copied into before the call, out of after it), each as a mem handle of the live graph's context
   (`point_at`, which registers on first use and falls back to raw buffers when refused).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from qnnrt.core.binary import GraphSpec
from qnnrt.core.clock import CLOCK
from qnnrt.core.shared_buffer import SharedMemory
from qnnrt.core.tensor import TensorSpec, prepare_input
from qnnrt.errors import QnnrtError
from qnnrt.core.call import BoundCall, LiveGraph, LocalGraph, PreparedCall

if TYPE_CHECKING:

    from qnnrt.core.profile import Profile

# an input conversion chosen at plan time: array of another dtype / shape / layout -> the tensor's
InputAdapter = Callable[[np.ndarray], np.ndarray]
ProfileSink = Callable[[list[dict]], None]   # receives the events of one graph call
# after each call made here: its end (core.clock.CLOCK), seconds inside graphExecute, its profile
# events (None when the call is not profiled)
CallObserver = Callable[[int, float, "list[dict] | None"], None]
_FAST_DEQUANT = {np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16)}


class Dequantizer:
    """Raw fixed-point buffer -> float32 in one pass, bit-identical to TensorSpec.dequantize: for
    8/16-bit codes q + offset is exact in float32, and a float32 x float32 product is exact in
    float64, so rounding it once to float32 equals the float32 product. Other cases take the
    float64 path."""
    __slots__ = ("spec", "offset", "scale", "fast")

    def __init__(self, spec: TensorSpec) -> None:
        q = spec.quantization
        if q is None:
            raise QnnrtError(f"{spec.name}: {spec.data_type_name} tensor has no quantization "
                             f"parameters (scale / offset) to convert with")
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


@dataclass(frozen=True)
class PrepareInput:
    """The default input adapter: checked and converted like any graph input (a value, so a
    binder can be sent to the PD worker that runs its graph)."""
    spec: TensorSpec
    where: str

    def __call__(self, a: np.ndarray) -> np.ndarray:
        return prepare_input(self.spec, a, self.where)


@dataclass(frozen=True)
class BindingLayout:
    """A binder's plan (`GraphBinding.layout`): its slots, which outputs it dequantizes, which
    inputs it trusts, the buffers it bound once, the input adapters that are not the default."""
    in_slots: tuple[int, ...]
    out_slots: tuple[int, ...]
    dequantized: tuple[bool, ...]
    where: str
    trusted: tuple[int, ...]
    bound_inputs: dict[int, np.ndarray]
    bound_outputs: dict[int, np.ndarray]
    adapters: dict[int, InputAdapter]


class GraphBinding:
    """The one binder: graph input i reads `values[in_slots[i]]`, output j lands in
    `values[out_slots[j]]`, and `run(values)` makes the graph call.

    Built once per call site. By default an input is checked per call (right dtype, shape and
    C-contiguous, else converted by its adapter, `prepare_input` unless set) and an output goes to a
    fresh array (a raw buffer and a float32 result when it is dequantized). The planner may instead
    `trust_input` (the slot always holds the right array: pointed, no check), `bind_input` or
    `bind_output` a planned buffer once. Re-create safe: only `call.handle` changes when the graph's
    context is re-created (`point_at`; with shared memory, the mem handles too).

    With `shared` (a `SharedMemory`; only for a `BoundCall`, in this process), every tensor is
    bound to rpcmem: a planned buffer made there as it is; at the first `point_at`, each input or
    output still per call gets a staging array there, copied into before the call / out of after
    it (a fresh array per call, as without)."""

    __slots__ = ("call", "spec", "where", "in_slots", "out_slots", "dequantized", "shared",
                 "_trusted", "_checked", "_fresh", "_deq", "_after_call", "_sink", "_read", "_observer",
                 "_mem", "_staged", "_copy_in", "_copy_out", "_own", "_bound_in", "_bound_out",
                 "_bare")

    def __init__(self, call: PreparedCall, spec: GraphSpec, in_slots: Sequence[int],
                 out_slots: Sequence[int], dequantize: bool | Sequence[bool], where: str,
                 shared: SharedMemory | None = None) -> None:
        if len(in_slots) != len(spec.inputs) or len(out_slots) != len(spec.outputs):
            raise QnnrtError(f"{where}: {len(in_slots)} input / {len(out_slots)} output slots for "
                             f"a graph of {len(spec.inputs)} / {len(spec.outputs)}")
        self.call = call
        self.spec, self.where = spec, where
        self.in_slots, self.out_slots = list(in_slots), list(out_slots)
        flags = ([dequantize] * len(spec.outputs) if isinstance(dequantize, bool)
                 else list(dequantize))
        # whether output j reaches its slot as float32 (dequantized) rather than as stored
        self.dequantized = [s.is_fixed_point and f for s, f in zip(spec.outputs, flags)]
        self._after_call: Callable[[float], None] | None = None   # the attached observers, if any
        self._sink: ProfileSink | None = None
        self._read: Callable[[], list[dict]] | None = None   # the call's profile events
        self._observer: CallObserver | None = None
        self.shared = shared if isinstance(call, BoundCall) else None
        # tensors bound to shared memory: (is an input, its index, the rpcmem array, its spec)
        self._mem: list[tuple[bool, int, np.ndarray, TensorSpec]] = []
        self._staged = False
        self._copy_in: list[tuple[int, np.ndarray, InputAdapter | None]] = []  # slot, staging, check
        self._copy_out: list[tuple[int, np.ndarray]] = []                      # slot, staging
        self._own: list[np.ndarray] = []   # rpcmem arrays this binder made (staging, raw outputs)
        self._bound_in: dict[int, np.ndarray] = {}   # input -> the buffer bound once (bind_input)
        self._bound_out: dict[int, np.ndarray] = {}  # output -> the buffer bound once (bind_output)
        # per-call work lists (a planner moves entries between them before the first run)
        self._trusted: dict[int, int] = {}                   # input -> slot: pointed
        self._checked: dict[int, tuple[int, np.dtype, tuple[int, ...], InputAdapter]] = {}
        self._fresh: dict[int, tuple[int, tuple[int, ...], np.dtype]] = {}  # output -> slot, ...
        self._deq: dict[int, tuple[int, np.ndarray, Dequantizer, np.ndarray | None]] = {}
        for i, (s, slot) in enumerate(zip(spec.inputs, in_slots)):
            call.set_input_size(i, s.nbytes)
            self._checked[i] = (slot, s.dtype, tuple(s.shape), PrepareInput(s, where))
        for j, (s, slot) in enumerate(zip(spec.outputs, out_slots)):
            if self.dequantized[j]:
                raw = self._array(s)
                call.set_output(j, raw)
                self._track(False, j, raw, s)
                self._deq[j] = (slot, raw, Dequantizer(s), None)
            else:
                call.set_output_size(j, s.nbytes)
                self._fresh[j] = (slot, tuple(s.shape), s.dtype)
        self._settle()

    # -- sent to a PD worker (runtime/hosts/pd/portable.py) ---------------------------------------------
    def layout(self) -> BindingLayout:
        """How this binder binds each tensor: what rebuilds it over another call (a PD worker's).
        Only the binder's plan: no profiler, observer or shared memory (a worker has its own)."""
        return BindingLayout(tuple(self.in_slots), tuple(self.out_slots), tuple(self.dequantized),
                             self.where, tuple(self._trusted), dict(self._bound_in),
                             dict(self._bound_out),
                             {i: adapt for i, (_, _, _, adapt) in self._checked.items()
                              if not isinstance(adapt, PrepareInput)})

    @staticmethod
    def from_layout(call: PreparedCall, spec: GraphSpec, layout: BindingLayout) -> GraphBinding:
        """A binder over `call` bound as `layout` says (its arrays already this process's)."""
        b = GraphBinding(call, spec, layout.in_slots, layout.out_slots, layout.dequantized,
                         layout.where)
        for i in layout.trusted:
            b.trust_input(i)
        for i, buffer in layout.bound_inputs.items():
            b.bind_input(i, buffer)
        for i, adapter in layout.adapters.items():
            b.adapt_input(i, adapter)
        for j, buffer in layout.bound_outputs.items():
            b.bind_output(j, buffer)
        return b

    @property
    def reads(self) -> list[int]:
        return self.in_slots

    @property
    def writes(self) -> list[int]:
        return self.out_slots

    # -- plan time ----------------------------------------------------------------------------
    def _array(self, spec: TensorSpec) -> np.ndarray:
        """A zeroed array for `spec`'s tensor: in the shared memory when there is one."""
        if self.shared is None:
            return np.zeros(spec.shape, spec.dtype)
        a = self.shared.array(tuple(spec.shape), spec.dtype, f"{spec.name!r} of {self.where}")
        self._own.append(a)
        return a

    def release(self) -> None:
        """Give back the rpcmem this binder made; it is not called again (its graph was freed)."""
        shared, own, self._own = self.shared, self._own, []
        if shared is not None:
            for a in own:
                shared.free(a)

    def _track(self, is_input: bool, k: int, array: np.ndarray, spec: TensorSpec) -> None:
        """Tensor k reads / writes `array` from now on: as a mem handle when it is shared memory."""
        self._mem = [m for m in self._mem if (m[0], m[1]) != (is_input, k)]
        if self.shared is not None and self.shared.holds(array):
            self._mem.append((is_input, k, array, spec))

    def output_kind(self, j: int) -> tuple[np.dtype, tuple[int, ...]]:
        """(dtype, shape) of what output j puts in its slot."""
        s = self.spec.outputs[j]
        return (np.dtype(np.float32) if self.dequantized[j] else s.dtype), tuple(s.shape)

    def adapt_input(self, i: int, adapter: InputAdapter) -> None:
        """Input i, when its array is not already right, is converted by `adapter`."""
        slot, dtype, shape, _ = self._checked[i]
        self._checked[i] = (slot, dtype, shape, adapter)

    def trust_input(self, i: int) -> None:
        """Input i's slot always holds a C-contiguous array of the tensor's dtype and shape."""
        self._trusted[i] = self._checked.pop(i)[0]
        self._settle()

    def _check_buffer(self, what: str, buffer: np.ndarray, kind: tuple[np.dtype, tuple[int, ...]]
                      ) -> None:
        if (buffer.dtype, buffer.shape) != kind or not buffer.flags.c_contiguous:
            raise QnnrtError(f"{self.where}: a planned buffer {buffer.dtype}{list(buffer.shape)} "
                             f"for {what}, which holds {kind[0]}{list(kind[1])}")

    def bind_input(self, i: int, buffer: np.ndarray) -> None:
        """Input i always reads `buffer` (the tensor's dtype and shape), bound now, once."""
        s = self.spec.inputs[i]
        self._check_buffer(f"input {s.name!r}", buffer, (s.dtype, tuple(s.shape)))
        self._checked.pop(i, None)
        self._trusted.pop(i, None)
        self.call.set_input(i, buffer)
        self._track(True, i, buffer, s)
        self._bound_in[i] = buffer
        self._settle()

    def bound_input(self, i: int) -> np.ndarray | None:
        """The buffer input i was bound to once (`bind_input`), None when it is read per call."""
        return self._bound_in.get(i)

    def bind_output(self, j: int, buffer: np.ndarray) -> None:
        """Output j is written to `buffer` (of `output_kind(j)`) at every call; the planner puts
        `buffer` in the slot. For a dequantized output, `buffer` receives the float32 values."""
        self._check_buffer(f"output {self.spec.outputs[j].name!r}", buffer, self.output_kind(j))
        self._bound_out[j] = buffer
        if j in self._deq:
            slot, raw, deq, _ = self._deq[j]
            self._deq[j] = (slot, raw, deq, buffer)
        else:
            del self._fresh[j]
            self.call.set_output(j, buffer)
            self._track(False, j, buffer, self.spec.outputs[j])
        self._settle()

    def attach_profile(self, profile: Profile, sink: ProfileSink) -> None:
        """Record every call into `profile` and hand its events to `sink` after each call."""
        self._read = self.call.attach_profile(profile)   # a worker's call profiles in the worker
        self._sink = sink
        self._compose()

    def observe(self, observer: CallObserver) -> None:
        """After every call: `observer(end, seconds, events)` (the events when profiled)."""
        self._observer = observer
        self._compose()

    def _compose(self) -> None:
        """What runs after a call: nothing, the profile sink, the observer, or both (the end taken
        first, so reading the profile never lengthens the call's slice)."""
        read, sink, observer = self._read, self._sink, self._observer
        if observer is None:
            self._after_call = None if sink is None or read is None else lambda _s: sink(read())
            self._settle()
            return
        clock = CLOCK

        def after(seconds: float) -> None:
            end = clock()
            events = read() if read is not None else None
            if sink is not None and events is not None:
                sink(events)
            observer(end, seconds, events)
        self._after_call = after
        self._settle()

    def deliver_profile(self, events: list[dict]) -> None:
        """The events of a call made elsewhere (a PD worker ran it in a plan segment) go where
        this binder's own calls' events go."""
        if self._sink is not None:
            self._sink(events)

    def _stage(self) -> None:
        """Shared memory: the inputs and outputs still bound per call get staging arrays there."""
        self._staged = True
        outs = self.spec.outputs
        for i, slot in self._trusted.items():
            self._copy_in.append((slot, self._staged_input(i), None))
        for i, (slot, _dtype, _shape, adapt) in self._checked.items():
            self._copy_in.append((slot, self._staged_input(i), adapt))
        for j, (slot, _shape, _dtype) in self._fresh.items():
            staging = self._array(outs[j])
            self.call.set_output(j, staging)
            self._track(False, j, staging, outs[j])
            self._copy_out.append((slot, staging))
        self._trusted, self._checked, self._fresh = {}, {}, {}
        self._settle()

    def _staged_input(self, i: int) -> np.ndarray:
        s = self.spec.inputs[i]
        staging = self._array(s)
        self.call.set_input(i, staging)
        self._track(True, i, staging, s)
        return staging

    def point_at(self, graph: LiveGraph) -> None:
        """Call `graph` (live; its context may have been re-created) from now on. With shared
        memory, the tensors are bound to mem handles of its context (registered on first use, raw
        buffers when memRegister is refused)."""
        self.call.point_at(graph)
        if self.shared is None or not isinstance(graph, LocalGraph):
            return
        if not self._staged:
            self._stage()
        context, call, shared = graph.context, self.call, self.shared
        assert isinstance(call, BoundCall)
        for is_input, k, array, spec in self._mem:
            h = shared.mem_handle(context, array, spec)
            if h is None:
                (call.set_input if is_input else call.set_output)(k, array)
            elif is_input:
                call.set_input_mem(k, h)
            else:
                call.set_output_mem(k, h)

    @property
    def shared_tensors(self) -> int:
        """How many of this graph's tensors are bound to shared memory."""
        return len(self._mem)

    def _settle(self) -> None:
        """After every change to what a call does: whether it is the C call alone (every input
        and output bound once, nothing copied, dequantized or observed), decided here once, not
        at each call."""
        self._bare = not (self._trusted or self._checked or self._fresh or self._copy_in
                          or self._copy_out or self._deq or self._after_call is not None)

    @property
    def entry(self) -> Callable[[list], float]:
        """What a call site calls for one call with its slot list: `run`, or the bound C call itself
        when there is nothing else to do per call (one Python frame less). Read it again after the
        binder changes (`point_at`, `bind_*`, `attach_profile`): a plan does after each re-point."""
        call = self.call
        return call if self._bare and isinstance(call, BoundCall) else self.run

    # -- run time -----------------------------------------------------------------------------
    def run(self, values: list) -> float:
        """Bind, execute, collect; returns the seconds spent inside graphExecute."""
        if self._bare:   # nothing to do per call but the call
            return self.call()
        converted = self._bind(values) if self._trusted or self._checked or self._fresh else None
        if self._copy_in:
            self._copy_inputs(values)
        seconds = self.call()
        if self._after_call is not None:   # first: the call's end is now
            self._after_call(seconds)
        for slot, staging in self._copy_out:
            values[slot] = staging.copy()
        for slot, raw, deq, target in self._deq.values():
            values[slot] = deq(raw, target)
        del converted   # the converted inputs were kept alive through the call
        return seconds

    def _copy_inputs(self, values: list) -> None:
        """Shared memory: the per-call inputs into their staging arrays (checked ones first)."""
        for slot, staging, adapt in self._copy_in:
            a = values[slot]
            if adapt is not None and (a.dtype != staging.dtype or a.shape != staging.shape):
                a = adapt(a)
            np.copyto(staging, a)

    def _bind(self, values: list) -> list[np.ndarray]:
        """Point the per-call inputs and outputs; returns the converted inputs (to keep alive)."""
        call = self.call
        for i, slot in self._trusted.items():
            call.point_input(i, values[slot])
        converted = []
        for i, (slot, dtype, shape, adapt) in self._checked.items():
            a = values[slot]
            if a.dtype != dtype or a.shape != shape or not a.flags.c_contiguous:
                a = adapt(a)
                converted.append(a)
            call.point_input(i, a)
        for j, (slot, shape, dtype) in self._fresh.items():
            a = values[slot] = np.empty(shape, dtype)
            call.point_output(j, a)
        return converted
