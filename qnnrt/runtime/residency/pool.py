"""ContextPool: the live contexts of a program, kept by a residency policy (policy.py).

The executor asks the pool to make a context live before running one of its graphs (`acquire`)
and tells it when the graph is done (`release`). The pool owns the mechanisms: creation
(creation.py), the bookkeeping (ledger.py), the prefetch thread and one eviction loop
(`_make_room`: evict the policy's victim until the context to add fits the policy's bound), used
before a creation, before a prefetch and after a creation failed for lack of PD. The policy answers
what to create before the first call, what to evict, what to prefetch.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from qnnrt.core import Backend, Context, ContextBinary, Profile
from qnnrt.core.spill_fill import SpillFillGroup
from qnnrt.errors import QnnError, QnnrtError
from qnnrt.runtime.hooks import CreationProfiler, PoolHooks
from qnnrt.runtime.residency.creation import ContextMaker, FirstRuns
from qnnrt.runtime.residency.ledger import PdLedger, ResidencyStats, others_needs
from qnnrt.runtime.residency.order import CallOrder
from qnnrt.runtime.residency.policy import Residency
from qnnrt.runtime.residency.sources import LiveContexts

if TYPE_CHECKING:
    from qnnrt.runtime.vet.watch import StepWatch


class ContextPool:
    """Owns the live contexts of a program and applies a residency policy to them.

    `binaries` maps a context key to its ContextBinary. `hooks` (e.g. the heap profiler) get
    before_create(key), after_create(key, ok, pd_estimate_bytes), before_free / after_free(key,
    evicted) and mark(event, context=...). `watch` ("worker" vetting) notes the creation and the first graph
    run of the contexts whose keys it holds; until each has run once, `live_contexts` sends plans through
    acquire/release, where that note is written. Thread model: one caller thread (the executor) plus one prefetch
    thread; creations are serialized, eviction decisions are made on the caller thread.
    """

    def __init__(self, backend: Backend, binaries: dict[str, ContextBinary],
                 residency: Residency | str = "auto", hooks: PoolHooks | None = None,
                 pd_estimate: Callable[[list[str]], int | None] | None = None,
                 profiler: CreationProfiler | None = None, predictions: dict[str, int | None] | None = None,
                 budget_bytes: int | None = None, budget_source: str | None = None,
                 on_capacity: Callable[[int], None] | None = None,
                 watch: StepWatch | None = None,
                 spill_fill_group: SpillFillGroup | None = None):
        self.backend = backend
        self.binaries = binaries
        self.residency = Residency.parse(residency)
        self.hooks = hooks
        self.stats = ResidencyStats()
        self._bound = self.residency.bound
        self.ledger = PdLedger(self._bound, self.stats, predictions, budget_bytes, budget_source)
        self._on_capacity = on_capacity
        self._maker = ContextMaker(backend, binaries, hooks, pd_estimate, profiler, watch,
                                   spill_fill_group, self._live_key_set, self._note_failure)
        self._first_runs = FirstRuns(watch, binaries)
        self._live: dict[str, Context] = {}
        self._pending: dict[str, Future] = {}
        # bumped on every change of _live or _pending: a compiled plan that found all its contexts
        # live and nothing pending at generation G skips acquire/release while it is still G
        self.generation = 0
        self.prefetch_wakeups = 0  # prefetch jobs started (the thread woke to create something)
        self._prefetched: set[str] = set()  # created by a prefetch, not used yet
        self._in_use: dict[str, int] = {}
        self._lock = threading.RLock()
        self._executor: ThreadPoolExecutor | None = None
        self._order = CallOrder()
        self._closed = False

    def set_order(self, order: list[str]) -> None:
        """The static order in which the next method run uses contexts (one key per graph call)."""
        if order != self._order.keys:
            self._order = CallOrder(order)

    # -- creation and freeing ------------------------------------------------------------------
    def _live_key_set(self) -> set[str]:
        with self._lock:
            return set(self._live)

    def _others(self) -> list[int | None]:
        """Other programs' live contexts' reservations in this process's PD (lock held)."""
        return others_needs(self._live.values())

    def _note_failure(self, lines: list[str], live_before: set[str]) -> None:
        with self._lock:
            self.ledger.note_failure(lines, set(self._live), live_before, self._others())

    def _create(self, key: str) -> Context:
        """Create context `key` (not yet live), with the statistics and hooks of a creation."""
        if self.hooks:
            self.hooks.before_create(key)
        try:
            made = self._maker.make(key)
        except BaseException:
            with self._lock:
                self.stats.create_failures += 1
            if self.hooks:
                self.hooks.after_create(key, False, None)
            raise
        with self._lock:
            self.ledger.created(key, made.estimate)
            s = self.stats
            s.creates += 1
            s.create_seconds += made.seconds
            if key in s.ever_created:
                s.reloads += 1
            s.ever_created.add(key)
        if self.hooks:
            self.hooks.after_create(key, True, made.estimate)
            if made.events is not None and self._maker.dsp_state() == "on":
                self.hooks.record_dsp_events(key, made.events)
        return made.context

    def _free(self, key: str, evicted: bool, ctx: Context | None = None) -> None:
        """Free live context `key` (or `ctx`, a created context that never became live)."""
        if ctx is None:
            with self._lock:
                ctx = self._live.pop(key, None)
                self._prefetched.discard(key)
                self.generation += 1
            if ctx is None:
                return
        profile = Profile(self.backend, "basic") if self._maker.dsp_state() == "on" else None
        if self.hooks:
            self.hooks.before_free(key, evicted=evicted)
        try:
            ctx.close(profile)
            with self._lock:
                self.stats.frees += 1
                if evicted:
                    self.stats.evictions += 1
            if self.hooks:
                self.hooks.after_free(key, evicted=evicted)
                if profile is not None:
                    self.hooks.record_dsp_events(key, profile.events())
        finally:
            if profile is not None:
                profile.close()

    def _mark(self, what: str, key: str) -> None:
        """Residency decisions worth seeing on the heap timeline (creates and frees are there)."""
        if self.hooks is not None:
            self.hooks.mark(what, context=key, live=len(self._live))

    def _insert(self, key: str, ctx: Context) -> None:
        with self._lock:
            self._live[key] = ctx
            self.generation += 1
            self.ledger.note_peaks(self._live)

    def _found_capacity(self, live_now: int) -> None:
        """A creation failed for lack of PD: the ledger lowers the bound; bytes learned are passed on."""
        with self._lock:
            learned = self.ledger.found_capacity(live_now)
        if learned is not None and self._on_capacity is not None:
            self._on_capacity(learned)

    # -- eviction: one decision, one loop --------------------------------------------------------
    def _victim(self, position: int, keep: set[str]) -> str | None:
        """The policy's choice among the live, idle contexts not in `keep` (None: none may go)."""
        with self._lock:
            idle = [k for k in self._live if k not in keep and not self._in_use.get(k)]
        if not idle:
            return None
        victim = self.residency.victim(idle, self._order, position)
        if victim is not None and victim not in idle:
            raise QnnrtError(f"residency {self.residency}: its victim {victim!r} is not one of the idle "
                             f"live contexts it was offered; a policy's victim() must pick among them")
        return victim

    def _make_room(self, adding: str, position: int, keep: set[str]) -> bool:
        """Evict until `adding` fits the policy's bound; False when nothing more may go."""
        while True:
            with self._lock:
                keys = list(self._live) + list(self._pending) + [adding]
                if not self.ledger.over(keys, self._others):
                    return True
            victim = self._victim(position, keep | {adding})
            if victim is None:
                return False
            self._free(victim, evicted=True)

    # -- the executor's interface -------------------------------------------------------------
    def acquire(self, key: str, position: int = 0) -> Context:
        """Make context `key` live for the graph call at `position` of the current order, and
        mark it in use until `release`."""
        if self._closed:
            raise QnnrtError("program is closed")
        ctx = self._wait_pending(key)
        if ctx is None:
            with self._lock:
                ctx = self._live.get(key)
        if ctx is None:
            ctx = self._create_with_room(key, position)
        if key in self._first_runs.unproven:
            self._first_runs.begin(key)
        with self._lock:
            self._in_use[key] = self._in_use.get(key, 0) + 1
            if key in self._prefetched:
                self._prefetched.discard(key)
                self.stats.prefetch_hits += 1
        try:
            self._prefetch(position, current=key, current_busy=True)
        except BaseException:
            self.release(key)  # the caller never gets the context: do not pin it
            raise
        return ctx

    def release(self, key: str, position: int | None = None) -> None:
        """The graph call at `position` that used `key` is done."""
        self._first_runs.end(key)
        with self._lock:
            n = self._in_use.get(key, 0) - 1
            if n <= 0:
                self._in_use.pop(key, None)
            else:
                self._in_use[key] = n
        if n <= 0 and self.residency.free_after_use:
            self._free(key, evicted=False)
        elif position is not None and not self._closed:
            # `key` is idle now: if it is the best victim, the next context can replace it
            # while the CPU work between graph calls runs
            self._prefetch(position, current=key, current_busy=False)

    def _wait_pending(self, key: str) -> Context | None:
        with self._lock:
            fut = self._pending.get(key)
        if fut is None:
            return None
        t0 = time.perf_counter()
        try:
            fut.result()
        except Exception:  # noqa: BLE001 - prefetch failed (e.g. PD): the synchronous path retries with eviction
            pass
        with self._lock:
            self.stats.wait_seconds += time.perf_counter() - t0
            return self._live.get(key)

    def _create_with_room(self, key: str, position: int) -> Context:
        keep = {key}
        self._make_room(key, position, keep)
        while True:
            try:
                ctx = self._create(key)
            except QnnError as e:
                if not (self._bound.evict_when_full and e.is_out_of_memory):
                    raise
                with self._lock:
                    live_now = len(self._live)
                victim = self._victim(position, keep)
                if victim is None:
                    raise QnnrtError(
                        f"context {key!r} cannot be created even with no other context evictable "
                        f"({live_now} live, in use by the running graph): it does not fit in the "
                        f"accelerator's memory on its own.\n{e}") from e
                self._found_capacity(live_now)
                self._mark("pd_exhausted", key)
                self._free(victim, evicted=True)
                self._make_room(key, position, keep)  # by bytes, when the failure gave them
                continue
            self._insert(key, ctx)
            return ctx

    # -- prefetch ----------------------------------------------------------------------------
    def _prefetch(self, position: int, current: str, current_busy: bool) -> None:
        """Start creating the policy's next context on the background thread.

        While `current` executes it cannot be evicted, so the farthest-used idle context goes
        instead, even when the running one would be the better victim: that costs at most one
        extra creation per iteration (tests/runtime/test_residency_policy.py bounds it against
        Belady's optimum) and buys overlap of every creation with a graph execution (the latency
        it saves: bench/RESULTS.md, "Prefetch during the graph call"). Called again at release
        (`current_busy` False) for the case nothing idle could be evicted during the execution.
        """
        nxt = self.residency.prefetch(self._order, position, current)
        if nxt is None:
            return
        if nxt not in self.binaries:
            raise QnnrtError(f"residency {self.residency}: prefetch() named {nxt!r}, which is not a "
                             f"context of this program")
        with self._lock:
            if self._closed or nxt in self._live or nxt in self._pending:
                return
        if not self._make_room(nxt, position, {current} if current_busy else set()):
            return  # nothing evictable now: at release, or create it when it is needed
        with self._lock:
            if self._closed or nxt in self._live or nxt in self._pending:
                return
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1,
                                                    thread_name_prefix="qnnrt-prefetch")
            self.generation += 1
            self._pending[nxt] = self._executor.submit(self._prefetch_job, nxt)
            self.stats.prefetches += 1

    def _prefetch_job(self, key: str) -> None:
        self.prefetch_wakeups += 1
        try:
            ctx = self._create(key)
        except BaseException as e:
            # a policy that plans by the PD budget learns the PD's capacity from any failure
            pd = isinstance(e, QnnError) and e.is_out_of_memory and self._bound.pd_budget
            with self._lock:
                self._pending.pop(key, None)
                self.generation += 1
                live_now = len(self._live)
            if pd:
                self._found_capacity(live_now)
            self._mark("pd_exhausted" if pd else "prefetch_failed", key)
            raise
        with self._lock:
            self._pending.pop(key, None)
            self.generation += 1
            discard = self._closed
            if not discard:
                self._live[key] = ctx
                self._prefetched.add(key)
                self.ledger.note_peaks(self._live)
        if discard:
            self._free(key, evicted=False, ctx=ctx)

    # -- lifetime ----------------------------------------------------------------------------
    def preload(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Create what the policy creates before the first call (eager: every context)."""
        keys = self.residency.preload(list(self.binaries))
        unknown = [k for k in keys if k not in self.binaries]
        if unknown:
            raise QnnrtError(f"residency {self.residency}: preload() named {unknown[0]!r}, which is "
                             f"not a context of this program")
        self._create_each(keys, progress)

    def load_all(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Create every context now."""
        self._create_each(list(self.binaries), progress)

    def _create_each(self, keys: list[str], progress: Callable[[int, int], None] | None) -> None:
        for i, key in enumerate(keys):
            if key not in self._live:
                self._insert(key, self._create(key))
            if progress:
                progress(i + 1, len(keys))

    def live_contexts(self, keys: Iterable[str]) -> LiveContexts | None:
        """The contexts of `keys` and the generation they were read at, when every one is live and
        nothing is pending (the state a plan may run in without acquire/release), else None."""
        with self._lock:
            if self._closed or self._pending or any(k not in self._live for k in keys):
                return None
            unproven = self._first_runs.unproven
            if unproven and not unproven.isdisjoint(keys):
                return None  # a watched context's first run goes through acquire / release
            return LiveContexts(self.generation, {k: self._live[k] for k in keys})

    @property
    def live_keys(self) -> list[str]:
        with self._lock:
            return list(self._live)

    def live_context(self, key: str) -> Context:
        """The live context `key` (QnnrtError when it is not live)."""
        with self._lock:
            ctx = self._live.get(key)
        if ctx is None:
            raise QnnrtError(f"context {key!r} is not live")
        return ctx

    def stale_with(self, key: str) -> list[str]:
        """The contexts a DSP restart made stale with `key`: every live one, and `key`."""
        live = self.live_keys
        return live if key in live else live + [key]

    def _settle_pending(self) -> None:
        """Wait for the prefetches in flight (one that fails leaves its context not live)."""
        with self._lock:
            pending = list(self._pending.values())
        for fut in pending:
            try:
                fut.result()
            except Exception:  # noqa: BLE001 - a failed prefetch leaves the context not live
                pass

    def recreate(self, keys: list[str], restart_backend: bool = False) -> list[str]:
        """Free and create again the live contexts `keys` (with `restart_backend`, every live
        context, around a restart of the backend and device), after a graph call failed in a way
        re-creation can cure. The live set is the same afterwards and nothing is pending, so a plan
        that ran with all its contexts live may re-bind and go on; in-use marks are kept (their
        callers release them as usual). Returns the keys re-created, in order."""
        if self._closed:
            raise QnnrtError("program is closed")
        self._settle_pending()
        with self._lock:
            again = [k for k in self._live if restart_backend or k in keys]
        for key in reversed(again):  # newest first, as at close
            self._free(key, evicted=False)
        if restart_backend:
            self.backend.restart()
        for key in again:
            self._insert(key, self._create(key))
        for key in keys:  # not live before (e.g. freed by a failed prefetch): live for the retry
            if key not in again:
                again.append(key)
                self._insert(key, self._create(key))
        if self.hooks is not None:
            self.hooks.mark("recovered", contexts=again, backend_restarted=restart_backend)
        return again

    def summary(self) -> dict:
        """The pool's counters; safe from any thread (taken under the pool's lock)."""
        with self._lock:
            return self._summary()

    def _summary(self) -> dict:
        s = self.stats
        return {"policy": str(self.residency), "contexts_total": len(self.binaries),
                "peak_live": s.peak_live, "creates": s.creates, "frees": s.frees,
                "evictions": s.evictions, "reloads": s.reloads,
                "capacity_found": s.capacity_found, "create_failures": s.create_failures,
                "pd_failures_handled": s.pd_failures_handled, "prefetches": s.prefetches,
                "prefetch_hits": s.prefetch_hits,
                "create_seconds": round(s.create_seconds, 6),
                "prefetch_wait_seconds": round(s.wait_seconds, 6), **self.ledger.summary()}

    def close(self) -> None:
        """Cancel prefetches not started, wait for a running one, then free every live context
        (newest first). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = list(self._pending.items())
        for key, fut in pending:
            if fut.cancel():
                with self._lock:
                    self._pending.pop(key, None)
            else:
                try:
                    fut.result()
                except Exception:  # noqa: BLE001 - a failed prefetch made nothing to free
                    pass
        if self._executor:
            self._executor.shutdown(wait=True)
        for key in reversed(self.live_keys):
            try:
                self._free(key, evicted=False)
            except Exception:  # noqa: BLE001 - keep freeing the rest (a failed QNN free is logged)
                pass
