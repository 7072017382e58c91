"""Multi-PD residency: a program's contexts spread over several PDs, all resident: the first group in
the main process's own PD (PD 0), each other group in a worker process (one PD each).

`MultiPdPool` stands where a `ContextPool` stands for a Program: the plans ask it whether every
context is live (always, unless PD 0 evicts beyond --max-pds) and the Program asks it for each
graph's call object (`bound_call`: a BoundCall for PD 0, a RemoteCall for a worker's graph). A
`RemoteCall` has the calling shape of `core.graph.BoundCall` (set_input /
point_input / set_output / point_output / sizes, then `call(handle)` -> seconds in graphExecute):
its tensors are staging arrays in the shared arena, which the worker's own BoundCall reads and
writes in place; an array bound that is not the staging array itself is copied in (inputs) or out
(outputs) around the call. The placement comes from `pd_plan.place`.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

import numpy as np
from numpy.typing import DTypeLike

from qnnrt.core import Backend, ContextBinary, GraphSpec
from qnnrt.core.backend import live_contexts_in_process
from qnnrt.core.device_info import HtpDevice
from qnnrt.core.graph import BoundCall
from qnnrt.errors import QnnError, QnnrtError
from qnnrt.runtime import pd_channel as ch
from qnnrt.runtime import pd_protocol as proto
from qnnrt.profiling.heap import HeapProfiler
from qnnrt.runtime.pd_plan import Placement
from qnnrt.runtime.pd_segment import RemoteSegment
from qnnrt.runtime.segments import Segment
from qnnrt.runtime.performance import Choice
from qnnrt.runtime.residency import LiveContexts, Residency
from qnnrt.runtime.pd_worker import KEY_ENV, PARENT_ENV, group_pool
from qnnrt.spawn import python_command, signal_name

STOP_GRACE_S = 2.0   # a worker asked to close and still alive after this is killed
CLOSE_WAIT_S = 60.0  # for the close reply: freeing hundreds of contexts takes a while under load


class PdWorkerError(QnnrtError):
    """A PD worker failed: it could not create its contexts, a graph call failed, or it died."""


class PdQnnError(PdWorkerError, QnnError):
    """A QNN call failed inside a PD worker (the worker is fine): a QnnError naming the PD."""


def _worker_command(tail: list[str]) -> list[str]:
    return python_command("from qnnrt.runtime.pd_worker import main; main()", tail)


class PdWorker:
    """The main process's handle on one worker: its process, its channel, its contexts, and what
    it reported (its status block in the arena, and the replies that carry its vote)."""

    def __init__(self, index: int, keys: list[str], status: proto.StatusBlock, status_at: ch.Block):
        self.index, self.keys = index, list(keys)
        self.proc: subprocess.Popen | None = None
        self.channel: ch.Channel | None = None
        self.pid: int | None = None
        self.status, self.status_at = status, status_at
        self.calls = 0
        self.requests = 0        # run requests (graph calls, plan segments): round trips
        self.channel_s = 0.0     # round trips minus the worker's time in them
        self.execute_s = 0.0
        self.load_seconds: float | None = None
        self.performance: dict | None = None   # the worker's vote counts, from its last reply
        self.gone = False
        self.heap_report: dict | None = None   # the worker's heap profile, sent when it closed
        self._start_id: int | None = None

    @property
    def name(self) -> str:
        return f"PD {self.index}" + (f" (worker pid {self.pid})" if self.pid else "")

    def spawn(self) -> None:
        env = dict(os.environ, **{PARENT_ENV: str(os.getpid())})
        end: ch.PipeEnd | ch.ConnEnd
        if ch.use_pipes():
            req_r, req_w = os.pipe()
            rep_r, rep_w = os.pipe()
            try:
                self.proc = subprocess.Popen(_worker_command(["fds", str(req_r), str(rep_w)]),
                                             env=env, pass_fds=(req_r, rep_w))
            finally:
                os.close(req_r)
                os.close(rep_w)
            end = ch.PipeEnd(rep_r, req_w)
        else:
            from multiprocessing.connection import Listener
            key = os.urandom(16)
            with Listener(authkey=key) as listener:
                env[KEY_ENV] = key.hex()
                self.proc = subprocess.Popen(_worker_command(["conn", str(listener.address)]), env=env)
                end = ch.ConnEnd(listener.accept())
        self.channel = ch.Channel(end)
        self.pid = self.proc.pid

    def count(self, calls: int, execute_s: float, channel_s: float) -> None:
        """A request's graph calls, their seconds inside graphExecute, and what the round trip
        cost beyond the worker's work (for a plain call, beyond graphExecute)."""
        self.calls += calls
        self.requests += 1
        self.execute_s += execute_s
        self.channel_s += channel_s

    # -- requests ------------------------------------------------------------------------------
    def gone_error(self, what: str) -> PdWorkerError:
        """The worker ended: mark it gone; the error naming how and while doing `what`."""
        self.gone = True
        rc = self.proc.poll() if self.proc is not None else None
        if rc is None and self.proc is not None:
            try:
                rc = self.proc.wait(0.5)
            except subprocess.TimeoutExpired:
                rc = None
        how = (f"killed by {signal_name(-rc)}" if rc is not None and rc < 0 else
               f"exit status {rc}" if rc is not None else "its channel closed")
        return PdWorkerError(f"{self.name} ended ({how}) while {what}. The main process is fine; "
                             f"the program's workers were stopped. A crash inside QNN or a kill "
                             f"from outside (perhaps the out-of-memory killer) ends a worker.")

    def failure(self, frame: bytes, what: str) -> PdWorkerError:
        """The error a worker's E reply describes: a QNN error stays one (code, log, remedy; the
        recovery policy reads it), naming the PD; a non-qnnrt exception there is a bug in qnnrt
        and says so."""
        f = ch.parse_object(frame)
        if not isinstance(f, proto.Failure):
            raise ch.ProtocolError(f"{self.name}: an error frame carrying {type(f).__name__}")
        if f.qnn is not None:
            q, where = f.qnn, f"in {self.name}, {what}"
            return PdQnnError(q.function, q.code, q.code_name, q.message, list(q.log_tail), q.remedy,
                              f"{q.context} {where}" if q.context else where)
        if f.internal:
            err = PdWorkerError(f"{self.name}: {what} failed with an internal error (a bug in qnnrt): "
                                f"{f.type_name}: {f.message}\nworker traceback:\n{f.traceback}")
        else:
            err = PdWorkerError(f"{self.name}: {what} failed: {f.message}")
        err.code = f.code  # type: ignore[attr-defined]
        return err

    def control(self, request: proto.Request, what: str) -> Any:
        """Send a control request and return its reply (any thread; one request at a time)."""
        try:
            frame = self._channel(what).request(request)
        except OSError:
            raise self.gone_error(what) from None
        return self.reply(frame, what)

    def _channel(self, what: str) -> ch.Channel:
        if self.gone or self.channel is None:
            raise PdWorkerError(f"{self.name} is stopped; {what} is not possible")
        return self.channel

    def reply(self, frame: bytes, what: str) -> Any:
        """The payload of a reply frame; the error it carries raised; a closed channel is the
        worker's end."""
        if not frame:
            raise self.gone_error(what)
        kind = frame[:1]
        if kind == ch.ERROR:
            raise self.failure(frame, what)
        if kind != ch.REPLY:
            raise ch.ProtocolError(f"{self.name}: a {kind!r} frame in reply to a control request")
        return ch.parse_object(frame)

    def begin_start(self, config: proto.WorkerConfig, what: str) -> None:
        """Send the start request; `finish_start` reads its reply (workers start side by side)."""
        try:
            self._start_id = self._channel(what).begin(proto.Start(config))
        except OSError:
            raise self.gone_error(what) from None

    def finish_start(self, what: str) -> None:
        assert self._start_id is not None and self.channel is not None
        started = self.reply(self.channel.finish(self._start_id), what)
        self.load_seconds, self.performance = started.load_seconds, started.performance

    def stop(self) -> None:
        """Ask the worker to close (it frees its contexts), kill it if it does not; idempotent. A
        worker still busy with an earlier request after the grace time is killed."""
        proc, channel = self.proc, self.channel
        if proc is None:
            return
        if not self.gone and proc.poll() is None and channel is not None:
            try:
                if channel.settle(STOP_GRACE_S):
                    frame = channel.request(proto.Close(), timeout=CLOSE_WAIT_S)
                    if frame[:1] == ch.REPLY:
                        self.heap_report = ch.parse_object(frame).heap_report
            except (OSError, ch.ProtocolError):
                pass
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.gone = True
        if channel is not None:
            channel.end.close()
        self.proc = None


class RemoteCall:
    """A graph call executed by a PD worker, with the calling shape of `core.graph.BoundCall`."""

    def __init__(self, pool: "MultiPdPool", worker: PdWorker, call_id: int, key: str, spec: GraphSpec):
        self.pool, self.worker, self.call_id = pool, worker, call_id
        self.key, self.name = key, spec.name
        # BoundCall's attributes, unused here: the worker holds the graph and its log
        self.handle: Any = None
        self.profile_handle: Any = None
        self.precise_log = False
        self.profiled = False
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
        worker.control(proto.Bind(call_id, key, spec.name, tuple(ins), tuple(outs)),
                       f"binding graph {spec.name!r} of context {key!r}")

    def attach_profile(self, profile: Any) -> Callable[[], list[dict]]:
        """The worker records every call of this graph into a QNN profile of its own (at
        `profile`'s level) and sends the call's events with its reply."""
        self.worker.control(proto.ProfileCalls(self.call_id, profile.level),
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
            self.worker.control(proto.Point(self.call_id, kind == "out", i, want),
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
            frame = w.channel.call(self.call_id)  # type: ignore[union-attr]
        except (OSError, AttributeError):
            self.pool.broken(w, self)
        rtt = pc() - t0
        if frame[:1] != ch.OK:
            if not frame:
                self.pool.broken(w, self)
            if frame[:1] == ch.ERROR:
                raise w.failure(frame, f"graph {self.name!r} of context {self.key!r}")
            raise ch.ProtocolError(f"{w.name}: a {frame[:1]!r} frame in reply to a graph call")
        dt, events = ch.parse_ok(frame)
        if self.profiled:
            self.events = events or []
        w.count(1, dt, rtt - dt)
        for a, dst in zip(self._outs, self._dst):
            if dst is not None:
                np.copyto(dst.reshape(a.shape), a, casting="no")
        return dt


class RemoteGraph:
    """What `ctx.graph(name)` gives on the reference path: execute / execute_prepared."""

    def __init__(self, pool: "MultiPdPool", key: str, spec: GraphSpec):
        self.pool, self.key, self.spec, self.name = pool, key, spec, spec.name
        self.handle = None
        self.last_execute_seconds = 0.0
        self._call: RemoteCall | None = None

    @property
    def inputs(self) -> tuple:
        return self.spec.inputs

    @property
    def outputs(self) -> tuple:
        return self.spec.outputs

    def execute(self, inputs: Any, profile: object = None,
                dequantize: bool | Sequence[bool] = True) -> dict[str, np.ndarray]:
        from qnnrt.core.tensor import order_inputs, prepare_input
        where = f"graph {self.name!r}"
        values = order_inputs([s.name for s in self.spec.inputs], inputs, where)
        return self.execute_prepared([prepare_input(s, v, where) for s, v in
                                      zip(self.spec.inputs, values)], profile, dequantize)

    def execute_prepared(self, arrays: Sequence[np.ndarray], profile: object = None,
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


@dataclass(frozen=True)
class DevicePlacement:
    """Which HTP device each PD opens, from what the backend reports, and what was done."""
    devices: tuple[int, ...]     # device id per PD (PD 0 is the main process's: its backend's)
    cores_reported: int
    note: str
    arches: tuple[int | None, ...] = ()   # the HTP arch each device reports (selecting it needs one)


def place_on_devices(pds: int, reported: Sequence[HtpDevice] | None, why_not: str = "",
                     main_device: int = 0) -> DevicePlacement:
    """PDs spread over the HTP devices the backend reports, round robin from the main process's
    device (boards such as QCS9075 have two): each worker opens its device, so its PD and
    its contexts live there. Several cores of one device are reported only: a PD is per device."""
    if not reported:
        return DevicePlacement((main_device,) * pds, 0, f"the backend does not report its devices "
                               f"({why_not or 'none listed'}); every PD on the default device")
    cores = sum(max(1, d.cores) for d in reported)
    ids = [d.device_id for d in reported]
    if len(ids) == 1:
        more = f", {cores} cores (a PD is per device)" if cores > 1 else " with one core"
        return DevicePlacement((ids[0],) * pds, cores,
                               f"the backend reports one HTP device{more}: every PD on it")
    start = ids.index(main_device) if main_device in ids else 0
    chosen = [reported[(start + i) % len(ids)] for i in range(pds)]
    devices = tuple(d.device_id for d in chosen)
    where = ", ".join(f"PD {i} on device {d}" for i, d in enumerate(devices))
    return DevicePlacement(devices, cores, f"the backend reports {len(ids)} HTP devices "
                           f"({cores} cores in all): {where}", tuple(d.htp_arch for d in chosen))


def device_placement(backend: Backend, pds: int) -> DevicePlacement:
    """`place_on_devices` over what this backend reports."""
    from qnnrt.core.device_info import platform_info
    try:
        devs = platform_info(backend.lib)
    except QnnrtError as e:
        return place_on_devices(pds, None, str(e), backend.device_id)
    return place_on_devices(pds, devs, main_device=backend.device_id)


class LocalPd:
    """PD 0: the main process's own PD, holding the placement's first group in a ContextPool on
    the program's backend. Its graph calls are plain in-process calls (no channel, no other
    process); the workers hold the other groups."""

    def __init__(self, backend: Backend, binaries: dict[str, ContextBinary], placement: Placement,
                 heap: HeapProfiler | None, pool_options: dict[str, Any]):
        self.keys = list(placement.groups[0])
        self.pid = os.getpid()
        # this process's PD also holds other programs' live contexts: if the group does not fit
        # beside them, PD 0 evicts (its pool counts theirs against the budget) instead of failing
        others = sum(c.binary.pd_need().total or 0 for c in live_contexts_in_process())
        budget = placement.evict_budget(0, beside=others)
        self.pool = group_pool(backend, {k: binaries[k] for k in self.keys},
                               {k: placement.sizes.get(k) for k in self.keys}, budget, heap,
                               **pool_options)
        self.position = {k: i for i, k in enumerate(self.keys)}
        self.load_seconds: float | None = None

    def load(self) -> None:
        t0 = time.perf_counter()
        self.pool.preload()
        self.load_seconds = time.perf_counter() - t0


class MultiPdPool:
    """Every context resident, spread by a `Placement` over PDs: the first group in this process's
    own PD, each other group in a worker process."""

    def __init__(self, backend: Backend, binaries: dict[str, ContextBinary], placement: Placement,
                 residency: Residency, log_level: str = "warn",
                 progress: Callable[[int, int], None] | None = None, heap: HeapProfiler | None = None,
                 performance: Choice | None = None, pool_options: dict[str, Any] | None = None):
        self.backend, self.binaries, self.placement = backend, binaries, placement
        self.residency = residency
        self.heap = heap
        self.performance = performance   # the main process's vote, which every worker makes too
        self._generation = 0
        self.arena = ch.Arena()
        self.workers = [self._worker(i, keys) for i, keys in enumerate(placement.groups) if i > 0]
        self._where = {k: w for w in self.workers for k in w.keys}
        self._live = {k: RemoteContext(self, k, binaries[k]) for k in self._where}
        self._calls = 0
        self._segments = 0
        self._closed = False
        self.failure: str | None = None
        self.predictions = dict(placement.sizes)
        self.devices = device_placement(backend, len(placement.groups))
        with contextlib.ExitStack() as undo:
            undo.callback(self.arena.close)
            # PD 0's pool: the step watch, creation profiler and spill-fill group of this process
            self.local = LocalPd(backend, binaries, placement, heap, dict(pool_options or {}))
            undo.pop_all()
        with contextlib.ExitStack() as undo:
            undo.callback(self.close)  # a failed start stops every worker and frees PD 0
            for w in self.workers:   # all spawned and started first: they create side by side
                w.spawn()
            for w in self.workers:
                w.begin_start(self.worker_config(w, log_level), _creating(w.keys))
            self.local.load()
            if progress:
                progress(1, len(placement.groups))
            for i, w in enumerate(self.workers):
                w.finish_start(_creating(w.keys))
                if progress:
                    progress(i + 2, len(placement.groups))
            undo.pop_all()

    def _worker(self, index: int, keys: list[str]) -> PdWorker:
        array, block = self.arena.alloc((1,), proto.STATUS_DTYPE)
        return PdWorker(index, keys, proto.StatusBlock(array), block)

    def worker_config(self, w: PdWorker, log_level: str) -> proto.WorkerConfig:
        b, pl = self.binaries, self.placement
        return proto.WorkerConfig(
            backend_lib=str(self.backend.lib.backend_path), soc=self.backend.soc_model,
            log_level=log_level, names={k: b[k].name for k in w.keys},
            binaries={k: (str(b[k].path) if b[k].path is not None else bytes(b[k].buffer))
                      for k in w.keys},
            predictions={k: pl.sizes.get(k) for k in w.keys}, status=w.status_at,
            evict_budget=pl.evict_budget(w.index), heap=self.heap is not None,
            signed_pd=self.backend.signed_pd, device_id=self.devices.devices[w.index],
            htp_arch=self.devices.arches[w.index] if self.devices.arches else None,
            performance=self.performance)

    def vote(self, choice: Choice) -> None:
        """Every worker votes `choice` (the main process's per-run override, and its end)."""
        for w in self.workers:
            if not w.gone:
                w.performance = w.control(proto.Vote(choice),
                                          f"voting performance mode {choice.mode}").performance

    # -- what the plans and the Program ask ----------------------------------------------------
    @property
    def generation(self) -> int:
        """Bumped on every change: this pool's (a worker stopped) plus PD 0's (an eviction there)."""
        return self._generation + self.local.pool.generation

    def buffer(self, shape: tuple, dtype: DTypeLike) -> np.ndarray:
        """A zeroed array in the shared arena: bound to a RemoteCall, the worker reads or writes
        it in place (no copy in the main process)."""
        return self.arena.alloc(tuple(shape), dtype)[0]

    def bound_call(self, key: str, spec: GraphSpec) -> BoundCall | RemoteCall:
        """PD 0's graphs are called in this process; the others through their worker."""
        if key in self._where:
            return self.remote_call(key, spec)
        return BoundCall(self.backend, spec)

    def host_of(self, key: str) -> int:
        """0 for PD 0's contexts (this process), else the index of the PD whose worker holds it."""
        w = self._where.get(key)
        return w.index if w is not None else 0

    def segment_step(self, segment: Segment, template: list, program: Any) -> RemoteSegment:
        """The step that has the worker of `segment.host` run it on one request."""
        worker = self.workers[segment.host - 1]
        self._segments += 1

        def broken(what: str) -> NoReturn:
            self.broken_while(worker, what)
        return RemoteSegment(segment, self._segments, template, program, worker, self.arena,
                             _call_id, broken)

    def remote_call(self, key: str, spec: GraphSpec) -> RemoteCall:
        c = RemoteCall(self, self._where[key], self._calls, key, spec)
        self._calls += 1
        return c

    def live_contexts(self, keys: Iterable[str]) -> LiveContexts | None:
        """All of `keys` when PD 0's are live (always, unless it evicts) and the pool is neither
        closed nor broken."""
        if self._closed or self.failure:
            return None
        generation = self.generation
        keys = list(keys)
        local = [k for k in keys if k not in self._where]
        found: dict[str, Any] = {}
        if local:
            live = self.local.pool.live_contexts(local)
            if live is None:
                return None
            found.update(live.contexts)
        found.update((k, self._live[k]) for k in keys if k in self._where)
        return LiveContexts(generation, found)

    def set_order(self, order: list[str]) -> None:
        pass  # each PD keeps its group's order (the placement's)

    def acquire(self, key: str, position: int = 0) -> Any:
        if self._closed or self.failure:
            raise PdWorkerError(self.failure or "program is closed")
        if key in self._where:
            return self._live[key]
        return self.local.pool.acquire(key, self.local.position[key])

    def release(self, key: str, position: int | None = None) -> None:
        if key not in self._where and not self._closed:
            self.local.pool.release(key, self.local.position[key])

    def load_all(self, progress: Callable[[int, int], None] | None = None) -> None:
        pass  # every PD created its contexts at start

    # -- recovery (runtime/recovery.py): one policy and budget in this process, for every PD ----
    def _pd_of(self, key: str) -> int:
        w = self._where.get(key)
        return w.index if w is not None else 0

    def _keys_of(self, pd: int) -> list[str]:
        return list(self.local.keys) if pd == 0 else list(self.workers[pd - 1].keys)

    def _same_device(self, key: str) -> list[int]:
        """The PDs on `key`'s HTP device: a DSP restart there makes all of them stale."""
        devices = self.devices.devices
        return [i for i, d in enumerate(devices) if d == devices[self._pd_of(key)]]

    def stale_with(self, key: str) -> list[str]:
        """The contexts a DSP restart made stale with `key`: every one of every PD on its HTP
        device (this process's and the workers'), re-created as one recovery."""
        return [k for pd in self._same_device(key) for k in self._keys_of(pd)]

    def live_context(self, key: str) -> Any:
        if key in self._where:
            if self._closed or self.failure:
                raise PdWorkerError(self.failure or "program is closed")
            return self._live[key]
        return self.local.pool.live_context(key)

    def recreate(self, keys: list[str], restart_backend: bool = False) -> list[str]:
        """Free and create `keys` again, each in its PD; with `restart_backend` (the DSP could not
        restore the session), the backend and device of every PD on that HTP device too."""
        pds = (self._same_device(keys[0]) if restart_backend and keys
               else sorted({self._pd_of(k) for k in keys}))
        done: list[str] = []
        for pd in pds:
            mine = [k for k in keys if self._pd_of(k) == pd] or self._keys_of(pd)
            if pd == 0:
                done += self.local.pool.recreate(mine, restart_backend)
                continue
            w = self.workers[pd - 1]
            recreated = w.control(proto.Recreate(tuple(mine), restart_backend),
                                  f"re-creating {len(mine)} context(s) for recovery")
            w.performance = recreated.performance
            done += list(recreated.keys)
            self._generation += 1
        return done

    @property
    def live_keys(self) -> list[str]:
        return self.local.pool.live_keys + list(self._live)

    def broken(self, worker: PdWorker, call: RemoteCall) -> NoReturn:
        """A worker died during `call`: stop every worker, raise the error naming both."""
        self.broken_while(worker, f"running graph {call.name!r} of context {call.key!r}")

    def broken_while(self, worker: PdWorker, what: str) -> NoReturn:
        """A worker died while doing `what`: stop every worker, raise the error naming both."""
        err = worker.gone_error(what)
        self.failure = str(err)
        self._generation += 1
        for c in self._live.values():
            c.mark_closed()
        self._stop_workers()
        raise err

    # -- reporting -----------------------------------------------------------------------------
    def _local_summary(self) -> dict:
        s = self.local.pool.summary()
        return {"pd": 0, "pid": self.local.pid, "in_process": True, "device": self.devices.devices[0],
                "where": f"this process, pid {self.local.pid}", "contexts": len(self.local.keys),
                "first": self.local.keys[0] if self.local.keys else None,
                "last": self.local.keys[-1] if self.local.keys else None,
                "pd_predicted_bytes": self.placement.pd_bytes[0],
                "pd_reported_bytes": s.get("pd_estimate_total_bytes"),
                "creates": s.get("creates"), "evictions": s.get("evictions"),
                "evicting": not self.local.pool.residency.resident, "load_seconds": self.local.load_seconds,
                "graph_calls": None, "round_trips": None, "channel_us_per_call": None,
                "channel_us_per_round_trip": None, "execute_seconds": None,
                "performance": None}

    def pd_summaries(self) -> list[dict]:
        out = [self._local_summary()]
        for w in self.workers:   # read from the status block: no request, whatever runs
            s = w.status.read()
            out.append({"pd": w.index, "pid": w.pid, "in_process": False,
                        "device": self.devices.devices[w.index],
                        "where": f"worker pid {w.pid}", "contexts": len(w.keys),
                        "first": w.keys[0] if w.keys else None,
                        "last": w.keys[-1] if w.keys else None,
                        "pd_predicted_bytes": self.placement.pd_bytes[w.index],
                        "pd_reported_bytes": s["pd_estimate_total_bytes"],
                        "creates": s["creates"], "evictions": s["evictions"],
                        "evicting": w.index in self.placement.evicting,
                        "load_seconds": w.load_seconds,
                        "graph_calls": w.calls, "round_trips": w.requests,
                        "channel_us_per_call": (round(w.channel_s / w.calls * 1e6, 2)
                                                if w.calls else None),
                        "channel_us_per_round_trip": (round(w.channel_s / w.requests * 1e6, 2)
                                                      if w.requests else None),
                        "execute_seconds": round(w.execute_s, 6),
                        "performance": w.performance})
        return out

    def summary(self) -> dict:
        pds = self.pd_summaries()
        creates = sum(p["creates"] or 0 for p in pds)
        total = self.placement.total_bytes
        reported = [p["pd_reported_bytes"] for p in pds]
        return {"policy": str(self.residency), "contexts_total": len(self.binaries),
                "pds": len(pds), "pd_workers": pds,
                "peak_live": len(self.live_keys), "creates": creates,
                "frees": self.local.pool.summary().get("frees", 0),
                "evictions": sum(p["evictions"] or 0 for p in pds),
                "reloads": 0, "capacity_found": None, "create_failures": 0,
                "pd_failures_handled": 0, "prefetches": 0, "prefetch_hits": 0,
                "create_seconds": None, "prefetch_wait_seconds": 0.0,
                "pd_estimate_total_bytes": (sum(reported) if None not in reported else None),
                "pd_peak_bytes": max((r or 0) for r in reported) if reported else 0,
                "pd_predicted_bytes": dict(self.predictions),
                "pd_predicted_total_bytes": total,
                "pd_peak_predicted_bytes": max(self.placement.pd_bytes, default=0),
                "pd_mismatches": [], "pd_budget_bytes": self.placement.budget_bytes,
                "pd_budget_source": self.placement.budget_source,
                "capacity_bytes_found": None, "failure": self.failure,
                "htp_cores_reported": self.devices.cores_reported, "pd_devices": self.devices.note}

    # -- lifetime ------------------------------------------------------------------------------
    def _stop_workers(self) -> None:
        for w in self.workers:
            try:
                w.stop()
            except BaseException:  # noqa: BLE001 - stop the others whatever happens
                if w.proc is not None:
                    w.proc.kill()

    def close(self) -> None:
        """Stop every worker (each frees its contexts), free PD 0's contexts, then release the
        arena. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._generation += 1
        for c in self._live.values():
            c.mark_closed()
        try:
            self._stop_workers()
        finally:
            try:
                self.local.pool.close()
            finally:
                for w in self.workers:   # what they reported outlives the arena
                    w.status = proto.StatusBlock(w.status.array.copy())
                self.arena.close()
        if self.heap is not None:
            for w in self.workers:
                if w.heap_report is not None:
                    self.heap.add_process(f"pd{w.index}", w.heap_report)


def _call_id(obj: object) -> int | None:
    """A RemoteCall's id (a plan segment sent to a worker names its calls by it)."""
    return obj.call_id if isinstance(obj, RemoteCall) else None


def _creating(keys: list[str]) -> str:
    return f"creating its {len(keys)} context(s) ({keys[0]} .. {keys[-1]})" if keys else "starting"
