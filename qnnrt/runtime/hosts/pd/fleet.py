"""Multi-PD residency: a program's contexts spread over several PDs, all resident: the first group in
the main process's own PD (PD 0, a ContextPool here), each other group in a worker process (one PD
each, reached through its `handle.PdWorker`).

`MultiPdPool` is a program's pool and its hosts (runtime/hosts/): the plans ask it whether every
context is live (always, unless PD 0 evicts beyond --max-pds), which host runs a context's graphs,
for each graph's call object (a BoundCall for PD 0's, a `remote.RemoteCall` for a worker's) and
for the step that has a worker run its part of the plan (`segment.RemoteSegment`). The
placement comes from `placement.place`, the devices from `devices.py`.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass
from collections.abc import Callable, Iterable
from typing import NoReturn

import numpy as np
from numpy.typing import DTypeLike

from qnnrt.core import Backend, ContextBinary, GraphSpec
from qnnrt.core.backend import live_contexts_in_process
from qnnrt.core.call import BoundCall
from qnnrt.profiling.observers import pool_hooks
from qnnrt.runtime.hosts.pd import channel as ch
from qnnrt.runtime.hosts.pd import protocol as proto
from qnnrt.runtime.hosts.pd.devices import device_placement
from qnnrt.runtime.hosts.pd.handle import PdWorker, PdWorkerError
from qnnrt.runtime.hosts.pd.placement import Placement
from qnnrt.runtime.hosts.pd.remote import RemoteCall, RemoteContext, call_id_of
from qnnrt.runtime.hosts.pd.segment import RemoteSegment
from qnnrt.runtime.performance import Choice
from qnnrt.runtime.plan_context import PlanContext
from qnnrt.runtime.residency import LiveContext, LiveContexts
from qnnrt.runtime.residency.groups import GroupSettings, PoolOptions, group_pool
from qnnrt.runtime.segments import Segment


@dataclass(frozen=True)
class PdSummary:
    """One PD of a multi-PD program, as the summary reports it (`pd_workers`): where it runs, its
    contexts, predicted and QNN-reported PD bytes, creations; for a worker, its graph calls, round
    trips and what the channel cost (None for PD 0, whose calls are in-process)."""
    pd: int
    pid: int | None
    in_process: bool
    device: int
    where: str
    contexts: int
    first: str | None
    last: str | None
    pd_predicted_bytes: int
    pd_reported_bytes: int | None
    creates: int | None
    evictions: int | None
    evicting: bool
    load_seconds: float | None
    graph_calls: int | None = None
    round_trips: int | None = None
    channel_us_per_call: float | None = None
    channel_us_per_round_trip: float | None = None
    execute_seconds: float | None = None
    performance: dict | None = None   # the worker's vote counts

    def to_dict(self) -> dict:
        return asdict(self)


class LocalPd:
    """PD 0: the main process's own PD, holding the placement's first group in a ContextPool on
    the program's backend. Its graph calls are plain in-process calls (no channel, no other
    process); the workers hold the other groups."""

    def __init__(self, backend: Backend, binaries: dict[str, ContextBinary], placement: Placement,
                 options: PoolOptions):
        self.keys = list(placement.groups[0])
        self.pid = os.getpid()
        # this process's PD also holds other programs' live contexts: if the group does not fit
        # beside them, PD 0 evicts (its pool counts theirs against the budget) instead of failing
        others = sum(c.binary.pd_need().total or 0 for c in live_contexts_in_process())
        budget = placement.evict_budget(0, beside=others)
        group = GroupSettings({k: placement.sizes.get(k) for k in self.keys}, budget)
        self.pool = group_pool(backend, {k: binaries[k] for k in self.keys}, group,
                               pool_hooks(options.heap, options.tracer), options)
        self.position = {k: i for i, k in enumerate(self.keys)}
        self.load_seconds: float | None = None

    def load(self, progress: Callable[[int, int], None] | None = None) -> None:
        t0 = time.perf_counter()
        self.pool.preload(progress)
        self.load_seconds = time.perf_counter() - t0


class MultiPdPool:
    """Every context resident, spread by a `Placement` over PDs: the first group in this process's
    own PD, each other group in a worker process."""

    def __init__(self, backend: Backend, binaries: dict[str, ContextBinary], placement: Placement,
                 options: PoolOptions):
        self.backend, self.binaries, self.placement = backend, binaries, placement
        self.residency = options.residency
        self.heap = options.heap
        self.tracer = options.tracer
        # the main process's vote, which every worker makes too
        self.performance = options.performance.choice if options.performance else None
        progress = options.progress
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
            self.local = LocalPd(backend, binaries, placement, options)
            undo.pop_all()
        with contextlib.ExitStack() as undo:
            undo.callback(self.close)  # a failed start stops every worker and frees PD 0
            for w in self.workers:   # all spawned and started first: they create side by side
                w.spawn()
            for w in self.workers:
                w.begin_start(self.worker_config(w, options.log_level), _creating(w.keys))
            # progress counts contexts: PD 0's as it creates them, a worker's when it has started
            total = sum(len(g) for g in placement.groups)
            self.local.load(None if progress is None else lambda done, _: progress(done, total))
            created = len(self.local.keys)
            for w in self.workers:
                w.finish_start(_creating(w.keys))
                created += len(w.keys)
                if progress:
                    progress(created, total)
            undo.pop_all()

    def _worker(self, index: int, keys: list[str]) -> PdWorker:
        array, block = self.arena.alloc((1,), proto.STATUS_DTYPE)
        w = PdWorker(index, keys, proto.StatusBlock(array), block)
        w.tracer = self.tracer
        return w

    def worker_config(self, w: PdWorker, log_level: str) -> proto.WorkerConfig:
        b, pl = self.binaries, self.placement
        return proto.WorkerConfig(
            backend_lib=str(self.backend.lib.backend_path), soc=self.backend.soc_model,
            log_level=log_level, names={k: b[k].name for k in w.keys},
            binaries={k: (str(b[k].path) if b[k].path is not None else bytes(b[k].buffer))
                      for k in w.keys},
            status=w.status_at,
            group=GroupSettings({k: pl.sizes.get(k) for k in w.keys}, pl.evict_budget(w.index)),
            heap=self.heap is not None,
            signed_pd=self.backend.signed_pd, device_id=self.devices.devices[w.index],
            htp_arch=self.devices.arches[w.index] if self.devices.arches else None,
            performance=self.performance,
            trace=(proto.TraceSettings(f"PD {w.index} worker", self.tracer.max_events)
                   if self.tracer is not None else None))

    def vote(self, choice: Choice) -> None:
        """Every worker votes `choice` (the main process's per-run override, and its end)."""
        for w in self.workers:
            if not w.gone:
                w.performance = w.control(proto.Vote(choice), proto.Voted,
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

    def segment_step(self, segment: Segment, template: list, context: PlanContext) -> RemoteSegment:
        """The step that has the worker of `segment.host` run it on one request."""
        worker = self.workers[segment.host - 1]
        self._segments += 1

        def broken(what: str) -> NoReturn:
            self.broken_while(worker, what)
        return RemoteSegment(segment, self._segments, template, context, worker, self.arena,
                             call_id_of, broken)

    def graph_calls_elsewhere(self) -> int:
        return sum(w.status.segment_graph_calls for w in self.workers)

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
        found: dict[str, LiveContext] = {}
        if local:
            live = self.local.pool.live_contexts(local)
            if live is None:
                return None
            found.update(live.contexts)
        found.update((k, self._live[k]) for k in keys if k in self._where)
        return LiveContexts(generation, found)

    def set_order(self, order: list[str]) -> None:
        pass  # each PD keeps its group's order (the placement's)

    def acquire(self, key: str, position: int = 0) -> LiveContext:
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

    def live_context(self, key: str) -> LiveContext:
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
            recreated = w.control(proto.Recreate(tuple(mine), restart_backend), proto.Recreated,
                                  f"re-creating {len(mine)} context(s) for recovery")
            w.performance = recreated.performance
            w.absorb(recreated.trace)
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
    def _local_summary(self) -> PdSummary:
        s, keys = self.local.pool.summary(), self.local.keys
        return PdSummary(pd=0, pid=self.local.pid, in_process=True, device=self.devices.devices[0],
                         where=f"this process, pid {self.local.pid}", contexts=len(keys),
                         first=keys[0] if keys else None, last=keys[-1] if keys else None,
                         pd_predicted_bytes=self.placement.pd_bytes[0],
                         pd_reported_bytes=s.get("pd_estimate_total_bytes"),
                         creates=s.get("creates"), evictions=s.get("evictions"),
                         evicting=not self.local.pool.residency.resident,
                         load_seconds=self.local.load_seconds)

    def _worker_summary(self, w: PdWorker) -> PdSummary:
        """Read from the status block: no request, whatever runs."""
        s = w.status.read()
        return PdSummary(pd=w.index, pid=w.pid, in_process=False, device=self.devices.devices[w.index],
                         where=f"worker pid {w.pid}", contexts=len(w.keys),
                         first=w.keys[0] if w.keys else None, last=w.keys[-1] if w.keys else None,
                         pd_predicted_bytes=self.placement.pd_bytes[w.index],
                         pd_reported_bytes=s.pd_estimate_total_bytes, creates=s.creates,
                         evictions=s.evictions, evicting=w.index in self.placement.evicting,
                         load_seconds=w.load_seconds, graph_calls=w.calls, round_trips=w.requests,
                         channel_us_per_call=(round(w.channel_s / w.calls * 1e6, 2)
                                              if w.calls else None),
                         channel_us_per_round_trip=(round(w.channel_s / w.requests * 1e6, 2)
                                                    if w.requests else None),
                         execute_seconds=round(w.execute_s, 6), performance=w.performance)

    def pd_summaries(self) -> list[PdSummary]:
        return [self._local_summary()] + [self._worker_summary(w) for w in self.workers]

    def summary(self) -> dict:
        pds = self.pd_summaries()
        reported = [p.pd_reported_bytes for p in pds]
        return {"policy": str(self.residency), "contexts_total": len(self.binaries),
                "pds": len(pds), "pd_workers": [p.to_dict() for p in pds],
                "peak_live": len(self.live_keys), "creates": sum(p.creates or 0 for p in pds),
                "frees": self.local.pool.summary().get("frees", 0),
                "evictions": sum(p.evictions or 0 for p in pds),
                "reloads": 0, "capacity_found": None, "create_failures": 0,
                "pd_failures_handled": 0, "prefetches": 0, "prefetch_hits": 0,
                "create_seconds": None, "prefetch_wait_seconds": 0.0,
                "pd_estimate_total_bytes": (sum(r for r in reported if r is not None)
                                            if None not in reported else None),
                "pd_peak_bytes": max((r or 0) for r in reported) if reported else 0,
                "pd_predicted_bytes": dict(self.predictions),
                "pd_predicted_total_bytes": self.placement.total_bytes,
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


def _creating(keys: list[str]) -> str:
    return f"creating its {len(keys)} context(s) ({keys[0]} .. {keys[-1]})" if keys else "starting"
