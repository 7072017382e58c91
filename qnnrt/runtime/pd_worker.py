"""A PD worker: a process that owns one Backend (hence one PD) and the contexts placed on it.

It creates its contexts at start (a context that cannot be created fails the load, before the
first iteration; again only when the main process's recovery asks), makes the program's
performance vote, then executes graphs on request: each bound call's inputs and outputs are arrays
in the shared arena, so a request carries only the call's id and a reply the seconds spent in
graphExecute (and the call's QNN profile events when the program profiles). It ends when its
channel closes (the main process closed it, or died), when asked, or with its parent
(PR_SET_PDEATHSIG on Linux). SIGINT is ignored: a Ctrl-C reaches the whole process group, and the
main process decides when its workers stop.

Started by `runtime.pd_fleet` as `python -c "...pd_worker.main()" fds R W` (POSIX pipes) or
`... conn ADDRESS` (a multiprocessing connection; the key in QNNRT_PD_WORKER_KEY).
"""
from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

from qnnrt.core.process import die_with_parent
from qnnrt.errors import QnnError
from qnnrt.runtime import pd_channel as ch

if TYPE_CHECKING:
    from qnnrt.runtime.residency import ContextPool

KEY_ENV = "QNNRT_PD_WORKER_KEY"
PARENT_ENV = "QNNRT_PD_WORKER_PARENT"


def group_pool(backend: Any, binaries: dict, predictions: dict, evict_budget: int | None,
               hooks: Any = None, **options: Any) -> ContextPool:
    """The pool of one PD's contexts (a worker's, or the main process's own PD 0, which also
    passes its step watch, creation profiler and spill-fill group as `options`): every context
    resident, or `auto` under `evict_budget` when the group needs more than one PD holds (a program
    beyond --max-pds), with the placement's call order."""
    from qnnrt.profiling.pd_log import pd_estimate_from_log
    from qnnrt.runtime.residency import ContextPool
    pool = ContextPool(backend, binaries, "auto" if evict_budget else "eager",
                       pd_estimate=pd_estimate_from_log, predictions=predictions, hooks=hooks,
                       budget_bytes=evict_budget, budget_source="placement", **options)
    pool.set_order(list(binaries))
    return pool


class _Call:
    """One graph's bound call over arena arrays, executed on request. With every context of the
    worker resident (eager), the graph handle is kept until the pool re-creates the context
    (recovery); otherwise (more contexts than its PD holds) each call goes through the pool, at
    the context's position in the worker's order."""

    def __init__(self, pool: ContextPool, view: ch.ArenaView, key: str, graph: str, ins: list, outs: list,
                 position: int):
        from qnnrt.core.graph import BoundCall
        self.pool, self.key, self.graph, self.position = pool, key, graph, position
        self.resident = pool.residency.resident
        ctx = pool.acquire(key, position)
        try:
            g = ctx.graph(graph)
            self.handle = g.handle
            self.generation = pool.generation   # the handle is the live one while this holds
            spec = g.spec
        finally:
            pool.release(key, position)
        self.call = BoundCall(pool.backend, spec)
        self.profile: Any = None   # a QNN profile every call records into (the main asked for it)
        self.call_specs = (spec.inputs, spec.outputs)
        self.keep = []
        for i, (block, s) in enumerate(zip(ins, g.spec.inputs)):
            a = view.array(block, tuple(s.shape), s.dtype)
            self.call.set_input(i, a)
            self.keep.append(a)
        for j, (block, s) in enumerate(zip(outs, g.spec.outputs)):
            a = view.array(block, tuple(s.shape), s.dtype)
            self.call.set_output(j, a)
            self.keep.append(a)

    def point(self, view: ch.ArenaView, kind: str, index: int, block: ch.Block) -> None:
        """Input / output `index` reads / writes the arena array at `block` from now on."""
        spec = (self.call_specs[0] if kind == "in" else self.call_specs[1])[index]
        a = view.array(block, tuple(spec.shape), spec.dtype)
        (self.call.set_input if kind == "in" else self.call.set_output)(index, a)
        self.keep.append(a)

    def __call__(self) -> float:
        if self.resident:
            if self.generation != self.pool.generation:  # re-created (recovery): its new handle
                self.handle = self.pool.live_context(self.key).graph(self.graph).handle
                self.generation = self.pool.generation
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
    """The worker's state: backend, binaries, its context pool, bound calls."""

    def __init__(self, end: ch.PipeEnd | ch.ConnEnd) -> None:
        self.end = end
        self.view = ch.ArenaView()
        self.calls: dict[int, _Call] = {}
        self.backend: Any = None
        self.binaries: dict = {}
        self.pool: Any = None
        self.heap: Any = None
        self.performance: Any = None
        self.profile: Any = None

    def start(self, cfg: dict) -> dict:
        from qnnrt.core import Backend, ContextBinary
        from qnnrt.runtime.performance import Performance
        self.backend = Backend(backend_lib=cfg["backend_lib"], soc=cfg["soc"],
                               log_level=cfg["log_level"], signed_pd=cfg.get("signed_pd", False),
                               device_id=cfg.get("device_id", 0),
                               htp_arch=cfg.get("htp_arch") if cfg.get("device_id") else None)
        # the main process's vote, made here too: RPC latency and polling are per process
        self.performance = Performance(cfg["performance"], self.backend) if cfg.get("performance") else None
        for key, src in cfg["binaries"].items():
            self.binaries[key] = (ContextBinary(src, name=cfg["names"][key]) if isinstance(src, str)
                                  else ContextBinary(buffer=src, name=cfg["names"][key]))
        if cfg.get("heap"):
            from qnnrt.profiling.heap import HeapProfiler
            self.heap = HeapProfiler()
        self.pool = group_pool(self.backend, self.binaries, cfg["predictions"], cfg.get("evict_budget"),
                               self.heap)
        self.order = list(cfg["binaries"])
        t0 = time.perf_counter()
        self.pool.preload()
        return {"pid": os.getpid(), "load_seconds": time.perf_counter() - t0}

    def control(self, op: tuple) -> Any:
        what = op[0]
        if what == "start":
            return self.start(op[1])
        if what == "bind":
            _, call_id, key, graph, ins, outs = op
            self.calls[call_id] = _Call(self.pool, self.view, key, graph, ins, outs,
                                        self.order.index(key))
            return None
        if what == "point":
            _, call_id, kind, index, block = op
            call = self.calls.get(call_id)
            if call is None:
                raise ValueError(f"no bound call {call_id}")
            call.point(self.view, kind, index, block)
            return None
        if what == "profile":  # record call `call_id` into this worker's profile
            _, call_id, level = op
            call = self.calls.get(call_id)
            if call is None:
                raise ValueError(f"no bound call {call_id}")
            if self.profile is None:
                from qnnrt.core.profile import Profile
                self.profile = Profile(self.backend, level)   # freed with the backend
            call.profile = self.profile
            call.call.attach_profile(self.profile)
            return None
        if what == "recreate":  # recovery, driven by the main process: free and create again
            _, keys, restart_backend = op
            live = set(self.pool.live_keys)
            done = self.pool.recreate([k for k in keys if k in live], restart_backend=restart_backend)
            if restart_backend:
                self.after_restart()
            return done
        if what == "summary":
            s = self.pool.summary() if self.pool is not None else {}
            if self.performance is not None:
                s["performance"] = self.performance.vote_counts()
            return s
        if what == "vote":
            if self.performance is not None:
                self.performance.revote(op[1])
            return None
        if what == "crash":  # tests: die the way a crash inside QNN would
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError(f"unknown control {what!r}")

    def after_restart(self) -> None:
        """The backend restarted, which closed what it owned: vote again, and record the calls
        into a new profile."""
        from qnnrt.core.profile import Profile
        if self.performance is not None:
            self.performance.start(self.backend)
        if self.profile is not None:
            self.profile = Profile(self.backend, self.profile.level)
            for call in self.calls.values():
                if call.profile is not None:
                    call.profile = self.profile
                    call.call.attach_profile(self.profile)

    def loop(self) -> None:
        end, calls = self.end, self.calls
        while True:
            msg = end.recv()
            if not msg:
                return
            kind = msg[:1]
            try:
                if kind == ch.CALL:
                    call = calls[ch.parse_call(msg)]
                    seconds = call()
                    end.send(ch.ok_message(seconds) if call.profile is None
                             else ch.profiled_ok_message(seconds, call.profile.events()))
                    continue
                op = ch.parse_pickle(msg)
                if op[0] == "close":
                    end.send(ch.control_message(ch.REPLY, self.close()))
                    return
                end.send(ch.control_message(ch.REPLY, self.control(op)))
            except Exception as e:  # noqa: BLE001 - every failure goes back as a message
                code = getattr(e, "code", None)
                qnn = ({"function": e.function, "code_name": e.code_name, "message": e.message,
                        "log_tail": e.log_tail, "remedy": e.remedy, "context": e.context}
                       if isinstance(e, QnnError) else None)
                end.send(ch.control_message(ch.ERROR, (type(e).__name__, str(e), code,
                                                       traceback.format_exc(limit=4), qnn)))

    def close(self) -> dict | None:
        """Free every context, then the backend (idempotent); the heap report when profiling."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.close()
        for b in self.binaries.values():
            b.close()
        self.binaries = {}
        self.view.close()
        backend, self.backend = self.backend, None
        if backend is not None:
            backend.close()
        heap = self.heap
        if heap is None:
            return None
        if backend is not None:
            heap.mark("backend_freed")
        heap.close()
        return heap.to_json()


def _open_end(argv: list[str]) -> ch.PipeEnd | ch.ConnEnd:
    if argv[0] == "fds":
        return ch.PipeEnd(int(argv[1]), int(argv[2]))
    from multiprocessing.connection import Client
    return ch.ConnEnd(Client(argv[1], authkey=bytes.fromhex(os.environ.pop(KEY_ENV, ""))))


def main(argv: list[str] | None = None) -> None:
    """The worker process's entry; never returns."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (OSError, ValueError):
        pass
    try:
        parent = int(os.environ.pop(PARENT_ENV, "0") or 0)
    except ValueError:
        parent = 0
    die_with_parent(parent)
    end = _open_end(args)
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
