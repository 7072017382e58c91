"""A graph of a context that lives in a PD worker, called one graph at a time: what the paths that
do not run plan segments use (the reference path, the interpreted .pte path, an evicting PD 0's
pooled calls). `RemoteCall` has the calling shape of `core.graph.BoundCall` (set_input /
point_input / set_output / point_output / sizes, then `call()` -> seconds in graphExecute): its
tensors are staging arrays in the shared arena, which the worker's own BoundCall reads and writes in
place; an array bound that is not the staging array itself is copied in (inputs) or out (outputs)
around the call."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from qnnrt.core import ContextBinary, GraphSpec, Profile
from qnnrt.core.call import LiveGraph
from qnnrt.core.shared_buffer import SharedMemory
from qnnrt.errors import QnnrtError
from qnnrt.runtime.hosts.pd import channel as ch
from qnnrt.runtime.hosts.pd import protocol as proto
from qnnrt.runtime.hosts.pd.handle import PdWorker

if TYPE_CHECKING:
    from qnnrt.runtime.hosts.pd.fleet import MultiPdPool


class RemoteCall:
    """A graph call executed by a PD worker, with the calling shape of `core.graph.BoundCall`."""

    def __init__(self, pool: "MultiPdPool", worker: PdWorker, call_id: int, key: str, spec: GraphSpec):
        self.pool, self.worker, self.call_id = pool, worker, call_id
        self.key, self.name = key, spec.name
        self.profiled = False
        self.wait = ch.SpinWait()   # its replies: polled for as long as a call usually takes
        self.events: list[dict] = []   # the last call's profile events, when profiled
        self._ins: list[np.ndarray] = []
        self._outs: list[np.ndarray] = []
        ins, outs = [], []
        for s in spec.inputs:
            a, b = pool.arena.alloc(tuple(s.shape), s.dtype)
            self._ins.append(a)
            ins.append(b)
        for s in spec.outputs:
            a, b = pool.arena.alloc(tuple(s.shape), s.dtype)
            self._outs.append(a)
            outs.append(b)
        self._src: list[np.ndarray | None] = [None] * len(self._ins)   # bound input arrays
        self._dst: list[np.ndarray | None] = [None] * len(self._outs)  # bound output arrays
        self._home = {"in": ins, "out": outs}                     # the staging blocks
        self._at = {"in": list(ins), "out": list(outs)}           # where the worker points now
        worker.control(proto.Bind(call_id, key, spec.name, tuple(ins), tuple(outs)), proto.Done,
                       f"binding graph {spec.name!r} of context {key!r}")

    def point_at(self, graph: LiveGraph) -> None:
        """Nothing to point: the worker holds the graph, and re-points its own call when it
        re-creates the context (recovery)."""

    def attach_profile(self, profile: Profile) -> Callable[[], list[dict]]:
        """The worker records every call of this graph into a QNN profile of its own (at
        `profile`'s level) and sends the call's events with its reply."""
        self.worker.control(proto.ProfileCalls(self.call_id, profile.level), proto.Done,
                            f"profiling graph {self.name!r} of context {self.key!r}")
        self.profiled = True
        return lambda: self.events

    @property
    def staging_inputs(self) -> list[np.ndarray]:
        """The arena arrays the worker reads: bind these to avoid the copy-in."""
        return list(self._ins)

    @property
    def staging_outputs(self) -> list[np.ndarray]:
        """The arena arrays the worker writes: bind these (or read them) to avoid the copy-out."""
        return list(self._outs)

    @property
    def staged(self) -> int:
        """How many bound arrays live outside the arena (each copied per call)."""
        return sum(a is not None for a in self._src) + sum(a is not None for a in self._dst)

    def _point(self, kind: str, i: int, arr: np.ndarray) -> bool:
        """Point the worker's tensor at `arr` when it lives in the arena (True: no copy needed),
        else back at the staging array (False). A change costs one control round trip, so plans
        bind arena buffers once (`Program.buffer`), never per call."""
        block = self.pool.arena.block_of(arr)
        want = block if block is not None else self._home[kind][i]
        if self._at[kind][i] != want:
            self.worker.control(proto.Point(self.call_id, kind == "out", i, want), proto.Done,
                                f"binding graph {self.name!r} of context {self.key!r}")
            self._at[kind][i] = want
        return block is not None

    def set_input(self, i: int, arr: np.ndarray) -> None:
        self._src[i] = None if self._point("in", i, arr) else arr

    def point_input(self, i: int, arr: np.ndarray) -> None:
        if arr is not self._src[i]:
            self.set_input(i, arr)

    def set_input_size(self, i: int, nbytes: int) -> None:
        pass  # the staging array has the tensor's size

    def set_output(self, j: int, arr: np.ndarray) -> None:
        self._dst[j] = None if self._point("out", j, arr) else arr

    def point_output(self, j: int, arr: np.ndarray) -> None:
        if arr is not self._dst[j]:
            self.set_output(j, arr)

    def set_output_size(self, j: int, nbytes: int) -> None:
        pass

    def __call__(self) -> float:
        """Execute on the worker; seconds inside graphExecute (there)."""
        for a, src in zip(self._ins, self._src):
            if src is not None:
                np.copyto(a, src.reshape(a.shape), casting="no")
        w = self.worker
        pc = time.perf_counter
        t0 = pc()
        try:
            frame = w.channel.call(self.call_id, self.wait)  # type: ignore[union-attr]
        except (OSError, AttributeError):
            self.pool.broken(w, self)
        rtt = pc() - t0
        if frame[:1] != ch.OK:
            if not frame:
                self.pool.broken(w, self)
            if frame[:1] == ch.ERROR:
                raise w.failure(frame, f"graph {self.name!r} of context {self.key!r}")
            raise ch.ProtocolError(f"{w.name}: a {frame[:1]!r} frame in reply to a graph call")
        dt, tail_bytes = ch.parse_ok(frame)
        tail = proto.loads(tail_bytes, proto.CallTail) if tail_bytes else None
        if self.profiled:
            self.events = (tail.events if tail is not None else None) or []
        if tail is not None:
            w.absorb(tail.trace)
        w.count(1, dt, rtt - dt)
        for a, dst in zip(self._outs, self._dst):
            if dst is not None:
                np.copyto(dst.reshape(a.shape), a, casting="no")
        return dt


class RemoteGraph:
    """What `ctx.graph(name)` gives on the reference path: execute / execute_prepared."""

    def __init__(self, pool: "MultiPdPool", key: str, spec: GraphSpec):
        self.pool, self.key, self.spec, self.name = pool, key, spec, spec.name
        self.last_execute_seconds = 0.0
        self._call: RemoteCall | None = None

    @property
    def inputs(self) -> tuple:
        return self.spec.inputs

    @property
    def outputs(self) -> tuple:
        return self.spec.outputs

    def execute(self, inputs: object, profile: Profile | None = None,
                dequantize: bool | Sequence[bool] = True,
                shared: SharedMemory | None = None) -> dict[str, np.ndarray]:
        """`core.Graph.execute`'s contract, executed by the worker (`profile` is not read: a
        profiled program profiles in the worker; `shared` must be None: graph I/O of a worker
        lives in the arena)."""
        from qnnrt.core.tensor import order_inputs, prepare_input
        where = f"graph {self.name!r}"
        if shared is not None:
            raise QnnrtError(f"{where} of context {self.key!r} runs in a PD worker: its tensors "
                             f"live in the shared arena, not in this process's shared buffers")
        values = order_inputs([s.name for s in self.spec.inputs], inputs, where)
        return self.execute_prepared([prepare_input(s, v, where) for s, v in
                                      zip(self.spec.inputs, values)], profile, dequantize)

    def execute_prepared(self, arrays: Sequence[np.ndarray], profile: Profile | None = None,
                         dequantize: bool | Sequence[bool] = True) -> dict[str, np.ndarray]:
        if self._call is None:
            self._call = self.pool.remote_call(self.key, self.spec)
        c = self._call
        for i, a in enumerate(arrays):
            c.set_input(i, a)
        for j, a in enumerate(c.staging_outputs):
            c.set_output(j, a)
        self.last_execute_seconds = c()
        flags = ([dequantize] * len(self.spec.outputs) if isinstance(dequantize, bool)
                 else list(dequantize))
        return {s.name: (s.dequantize(raw) if deq and s.is_fixed_point else raw.copy())
                for s, raw, deq in zip(self.spec.outputs, c.staging_outputs, flags)}


class RemoteContext:
    """A context that lives in a worker: what the pool's users read of a live Context."""

    def __init__(self, pool: "MultiPdPool", key: str, binary: ContextBinary):
        self.pool, self.key, self.binary, self.name = pool, key, binary, binary.name
        self._graphs: dict[str, RemoteGraph] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def mark_closed(self) -> None:
        """Its worker stopped: plans that cached this context must look again."""
        self._closed = True

    def graph(self, name: str) -> RemoteGraph:
        g = self._graphs.get(name)
        if g is None:
            g = self._graphs[name] = RemoteGraph(self.pool, self.key, self.binary.graph(name))
        return g



def call_id_of(obj: object) -> int | None:
    """A RemoteCall's id (a plan segment sent to a worker names its calls by it)."""
    return obj.call_id if isinstance(obj, RemoteCall) else None
