"""A PD worker: a process that owns one Backend (hence one PD) and the contexts placed on it.

It creates its contexts at start (a context that cannot be created fails the load, before the
first iteration; again only when the main process's recovery asks), makes the program's
performance vote, then executes graphs on request: each bound call's inputs and outputs are arrays
in the shared arena, so a request carries only the call's id and a reply the seconds spent in
graphExecute (and the call's QNN profile events when the program profiles). It ends when its
channel closes (the main process closed it, or died), when asked, or with its parent
(PR_SET_PDEATHSIG on Linux). SIGINT is ignored: a Ctrl-C reaches the whole process group, and the
main process decides when its workers stop.

Started by `hosts.pd.handle` through `ipc.child.spawn` (its channel: POSIX pipes, or a
multiprocessing connection).
"""
from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from qnnrt.core.clock import CLOCK
from qnnrt.core.process import die_with_parent
from qnnrt.runtime.hosts.pd import channel as ch
from qnnrt.runtime.ipc.child import SpinWait, child_end
from qnnrt.runtime.hosts.pd import protocol as proto

if TYPE_CHECKING:
    from qnnrt.core import Backend, ContextBinary
    from qnnrt.profiling.heap import HeapProfiler
    from qnnrt.runtime.performance import Performance
    from qnnrt.core.call import PreparedCall
    from qnnrt.core.profile import Profile
    from qnnrt.runtime.hosts.pd.worker_segment import WorkerSegment
    from qnnrt.profiling.trace import Tracer
    from qnnrt.profiling.trace_events import TraceBatch
    from qnnrt.runtime.residency import ContextPool



class WorkerCall:
    """One graph's bound call over arena arrays, executed on request. With every context of the
    worker resident (eager), the graph handle is kept until the pool re-creates the context
    (recovery); otherwise (more contexts than its PD holds) each call goes through the pool, at
    the context's position in the worker's order. It has the calling shape of a BoundCall, so a
    binder sent with a plan segment (worker_segment.py) calls through it."""

    def __init__(self, pool: ContextPool, key: str, graph: str, position: int,
                 inputs: list[np.ndarray], outputs: list[np.ndarray]):
        from qnnrt.core.call import BoundCall
        self.pool, self.key, self.graph, self.position = pool, key, graph, position
        self.resident = pool.residency.resident
        ctx = pool.acquire(key, position)
        try:
            g = ctx.graph(graph)
            self.handle = g.handle
            self.generation = pool.generation   # the handle is the live one while this holds
            self.spec = g.spec
        finally:
            pool.release(key, position)
        self.call = BoundCall(pool.backend, self.spec)
        self.profile: Profile | None = None   # every call records into it (the main asked for it)
        self.call.handle = self.handle
        self.inputs, self.outputs = list(inputs), list(outputs)   # what each tensor points at
        for i, a in enumerate(self.inputs):
            self.call.set_input(i, a)
        for j, a in enumerate(self.outputs):
            self.call.set_output(j, a)

    @staticmethod
    def over_blocks(pool: ContextPool, view: ch.ArenaView, key: str, graph: str, position: int,
                    ins: list[ch.Block], outs: list[ch.Block]) -> "WorkerCall":
        spec = pool.binaries[key].graph(graph)
        return WorkerCall(pool, key, graph, position,
                     [view.array(b, tuple(s.shape), s.dtype) for b, s in zip(ins, spec.inputs)],
                     [view.array(b, tuple(s.shape), s.dtype) for b, s in zip(outs, spec.outputs)])

    def clone(self) -> "WorkerCall":
        """The same graph on a BoundCall of its own, pointing where this one points now (a plan
        segment's binder re-points its tensors per call; this call's stay as the main set them)."""
        c = WorkerCall(self.pool, self.key, self.graph, self.position, self.inputs, self.outputs)
        if self.profile is not None:
            c.record_into(self.profile)
        return c

    def record_into(self, profile: Profile) -> None:
        self.profile = profile
        self.call.attach_profile(profile)

    # -- BoundCall's calling shape -------------------------------------------------------------
    def point_at(self, graph: object) -> None:
        """Nothing to point: the call follows its context's live graph itself (`refresh`)."""

    def set_input(self, i: int, arr: np.ndarray) -> None:
        self.inputs[i] = arr
        self.call.set_input(i, arr)

    def point_input(self, i: int, arr: np.ndarray) -> None:
        self.inputs[i] = arr
        self.call.point_input(i, arr)

    def set_input_size(self, i: int, nbytes: int) -> None:
        self.call.set_input_size(i, nbytes)

    def set_output(self, j: int, arr: np.ndarray) -> None:
        self.outputs[j] = arr
        self.call.set_output(j, arr)

    def point_output(self, j: int, arr: np.ndarray) -> None:
        self.outputs[j] = arr
        self.call.point_output(j, arr)

    def set_output_size(self, j: int, nbytes: int) -> None:
        self.call.set_output_size(j, nbytes)

    def attach_profile(self, profile: Profile) -> Callable[[], list[dict]]:
        self.record_into(profile)
        return profile.events

    def refresh(self) -> None:
        """Point the call at its graph's live handle when the pool re-created contexts."""
        if self.resident and self.generation != self.pool.generation:
            self.handle = self.pool.live_context(self.key).graph(self.graph).handle
            self.generation = self.pool.generation
            self.call.handle = self.handle

    def __call__(self) -> float:
        if self.resident:
            self.refresh()
            self.call.handle = self.handle
            return self.call()
        pool = self.pool
        ctx = pool.acquire(self.key, self.position)
        try:
            self.call.handle = ctx.graph(self.graph).handle
            return self.call()
        finally:
            pool.release(self.key, self.position)


class Worker:
    """The worker's state: backend, binaries, its context pool, bound calls, its status block."""

    def __init__(self, end: ch.PipeEnd | ch.ConnEnd) -> None:
        self.end = end
        self.view = ch.ArenaView()
        self.calls: dict[int, WorkerCall] = {}
        self.backend: Backend | None = None
        self.binaries: dict[str, ContextBinary] = {}
        self.pool: ContextPool | None = None
        self.heap: HeapProfiler | None = None
        self.performance: Performance | None = None
        self.profile: Profile | None = None
        self.status: proto.StatusBlock | None = None
        self.evicting = False   # the pool's counters change with calls, not only with requests
        self.segments: dict[int, WorkerSegment] = {}
        self.clones: list[WorkerCall] = []            # the segments' own calls
        self.tracer: Tracer | None = None        # when the program traces: this worker's part

    def start(self, cfg: proto.WorkerConfig) -> proto.Started:
        from qnnrt.core import Backend, ContextBinary
        from qnnrt.runtime.performance import Performance
        self.status = proto.StatusBlock(self.view.array(cfg.status, (1,), proto.STATUS_DTYPE))
        self.backend = Backend(backend_lib=cfg.backend_lib, soc=cfg.soc, log_level=cfg.log_level,
                               signed_pd=cfg.signed_pd, device_id=cfg.device_id,
                               htp_arch=cfg.htp_arch if cfg.device_id else None)
        # the main process's vote, made here too: RPC latency and polling are per process
        self.performance = Performance(cfg.performance, self.backend) if cfg.performance else None
        for key, src in cfg.binaries.items():
            self.binaries[key] = (ContextBinary(src, name=cfg.names[key]) if isinstance(src, str)
                                  else ContextBinary(buffer=src, name=cfg.names[key]))
        if cfg.heap:
            from qnnrt.profiling.heap import HeapProfiler
            self.heap = HeapProfiler()
        if cfg.trace is not None:
            from qnnrt.profiling.trace import Tracer
            self.tracer = Tracer(max_events=cfg.trace.max_events, process=cfg.trace.process)
        from qnnrt.profiling.observers import pool_hooks
        from qnnrt.runtime.residency.groups import group_pool
        self.pool = group_pool(self.backend, self.binaries, cfg.group, pool_hooks(self.heap, self.tracer))
        self.evicting = not self.pool.residency.resident
        self.order = list(cfg.binaries)
        t0 = time.perf_counter()
        self.pool.preload()
        self.report_pool()
        return proto.Started(os.getpid(), time.perf_counter() - t0, self.vote_counts(),
                             CLOCK(), self.drain())

    @property
    def started_pool(self) -> ContextPool:
        if self.pool is None:
            raise ch.ProtocolError("a request before Start (or after Close): this worker has no pool")
        return self.pool

    @property
    def started_backend(self) -> Backend:
        if self.backend is None:
            raise ch.ProtocolError("a request before Start (or after Close): this worker has no backend")
        return self.backend

    def drain(self) -> TraceBatch | None:
        """The trace events since the last reply that carried them (None: not tracing)."""
        return self.tracer.drain() if self.tracer is not None else None

    def vote_counts(self) -> dict | None:
        return self.performance.vote_counts() if self.performance is not None else None

    def report_pool(self) -> None:
        """The pool's counters into the status block the main process reads."""
        if self.status is not None and self.pool is not None:
            s = self.pool.summary()
            self.status.write(creates=s["creates"], evictions=s["evictions"], frees=s["frees"],
                              pd_estimate_total_bytes=s["pd_estimate_total_bytes"])

    def handle(self, req: proto.Request) -> proto.Reply:
        if isinstance(req, proto.Start):
            return self.start(req.config)
        if isinstance(req, proto.Bind):
            self.calls[req.call] = WorkerCall.over_blocks(self.started_pool, self.view, req.key, req.graph,
                                                     self.order.index(req.key), list(req.inputs),
                                                     list(req.outputs))
            return proto.Done()
        if isinstance(req, proto.Point):
            call = self.bound(req.call)
            spec = (call.spec.outputs if req.output else call.spec.inputs)[req.index]
            a = self.view.array(req.block, tuple(spec.shape), spec.dtype)
            (call.set_output if req.output else call.set_input)(req.index, a)
            return proto.Done()
        if isinstance(req, proto.ProfileCalls):  # record the call into this worker's profile
            if self.profile is None:
                from qnnrt.core.profile import Profile
                self.profile = Profile(self.started_backend, req.level)   # freed with the backend
            self.bound(req.call).record_into(self.profile)
            self.calls_changed()
            return proto.Done()
        if isinstance(req, proto.Recreate):  # recovery, driven by the main process
            live = set(self.started_pool.live_keys)
            done = self.started_pool.recreate([k for k in req.keys if k in live],
                                      restart_backend=req.restart_backend)
            if req.restart_backend:
                self.after_restart()
            for c in self.clones:
                c.refresh()
            self.report_pool()
            return proto.Recreated(tuple(done), self.vote_counts(), self.drain())
        if isinstance(req, proto.Vote):
            if self.performance is not None:
                self.performance.revote(req.choice)
            return proto.Voted(self.vote_counts())
        if isinstance(req, proto.InstallSegment):
            from qnnrt.runtime.hosts.pd.worker_segment import WorkerSegment
            from qnnrt.runtime.hosts.pd.portable import Resolver
            assert self.status is not None
            resolver = Resolver(self.view, self.clone_call, lambda call_id: self.bound(call_id).spec)
            self.segments[req.segment] = WorkerSegment(req, resolver, self.owner, self.status,
                                                       self.tracer)
            return proto.Done()
        if isinstance(req, proto.StageOutputs):
            self.installed(req.segment).stage(self.view, req.blocks)
            return proto.Done()
        if isinstance(req, proto.Crash):
            os.kill(os.getpid(), signal.SIGKILL)
        raise ch.ProtocolError(f"a request this worker does not know: {type(req).__name__}")

    def clone_call(self, call_id: int) -> PreparedCall:
        """The call a segment's binder makes for bound call `call_id`: a clone of it; with every
        context resident, the clone's BoundCall itself (no hop per call; `refresh` re-points it
        after a re-creation)."""
        c = self.bound(call_id).clone()
        self.clones.append(c)
        return c.call if c.resident else c

    def owner(self, call: object) -> WorkerCall | None:
        """The clone a segment's call object belongs to (its profile, its refresh)."""
        return next((c for c in self.clones if c is call or c.call is call), None)

    def calls_changed(self) -> None:
        """Some call records into a profile now: each segment reads which of its calls do."""
        for seg in self.segments.values():
            seg.calls_changed()

    def all_calls(self) -> list[WorkerCall]:
        return list(self.calls.values()) + self.clones

    def installed(self, segment: int) -> WorkerSegment:
        seg = self.segments.get(segment)
        if seg is None:
            raise ch.ProtocolError(f"no installed segment {segment}")
        return seg

    def run_segment(self, frame: bytes) -> bytes:
        rid, segment, start = ch.parse_segment(frame)
        out = self.installed(segment).run(rid, start)
        if self.evicting:
            self.report_pool()
        return out

    def bound(self, call_id: int) -> WorkerCall:
        call = self.calls.get(call_id)
        if call is None:
            raise ch.ProtocolError(f"no bound call {call_id}")
        return call

    def after_restart(self) -> None:
        """The backend restarted, which closed what it owned: vote again, and record the calls
        into a new profile."""
        from qnnrt.core.profile import Profile
        if self.performance is not None:
            self.performance.start(self.started_backend)
        if self.profile is not None:
            self.profile = Profile(self.started_backend, self.profile.level)
            for call in self.all_calls():
                if call.profile is not None:
                    call.record_into(self.profile)
            self.calls_changed()

    def run_call(self, frame: bytes) -> bytes:
        rid, call_id = ch.parse_call(frame)
        call = self.bound(call_id)
        seconds = call()
        end = CLOCK()
        events = None if call.profile is None else call.profile.events()
        if self.evicting:
            self.report_pool()
        if self.tracer is None:
            return ch.ok_frame(rid, seconds,
                               b"" if events is None else proto.dumps(proto.CallTail(events, None)))
        self.tracer.graph_call(call.key, call.graph, end, seconds, events)
        return ch.ok_frame(rid, seconds, proto.dumps(proto.CallTail(events, self.drain())))

    def loop(self) -> None:
        """Serve requests until the channel closes or a Close: every request gets one reply with
        its id, a failure included."""
        end = self.end
        wait = SpinWait()   # the next request after a reply: soon, within a plan's iteration
        while True:
            frame = wait.recv(end)
            if not frame:
                return
            rid = 0
            try:
                kind, rid = ch.frame_head(frame)
                if kind == ch.CALL:
                    end.send(self.run_call(frame))
                    continue
                if kind == ch.SEGMENT:
                    end.send(self.run_segment(frame))
                    continue
                if kind != ch.CONTROL:
                    raise ch.ProtocolError(f"a frame of unknown kind {kind!r}")
                req = proto.loads_any(ch.frame_body(frame), proto.REQUESTS)
                if isinstance(req, proto.Close):
                    heap_report = self.close()
                    closed = proto.Closed(heap_report, self.drain())
                    end.send(ch.body_frame(ch.REPLY, rid, proto.dumps(closed)))
                    return
                assert isinstance(req, proto.REQUESTS)
                end.send(ch.body_frame(ch.REPLY, rid, proto.dumps(self.handle(req))))
            except Exception as e:  # noqa: BLE001 - every failure goes back as its request's reply
                failure = proto.Failure.of(e, traceback.format_exc(limit=8))
                end.send(ch.body_frame(ch.ERROR, rid, proto.dumps(failure)))

    def close(self) -> dict | None:
        """Free every context, then the backend (idempotent); the heap report when profiling."""
        from qnnrt.runtime.teardown import Holdings, close_all
        pool, self.pool = self.pool, None
        binaries, self.binaries = list(self.binaries.values()), {}
        backend, self.backend = self.backend, None
        self.status = None
        heap, self.heap = self.heap, None
        try:
            close_all(Holdings(pool, [], binaries, [self.view], backend, heap))
        finally:
            self.heap = heap
        return heap.to_json() if heap is not None else None


def main(argv: list[str] | None = None) -> None:
    """The worker process's entry; never returns."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (OSError, ValueError):
        pass
    try:
        parent = int(os.environ.pop(proto.PARENT_ENV, "0") or 0)
    except ValueError:
        parent = 0
    die_with_parent(parent)
    end = child_end(args)
    worker = Worker(end)
    code = 0
    try:
        worker.loop()
    except BaseException:  # noqa: BLE001 - the main process sees the channel close
        code = 1
    finally:
        try:
            worker.close()
        finally:
            end.close()
            os._exit(code)
