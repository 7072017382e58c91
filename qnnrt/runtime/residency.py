"""Context residency: which contexts are live, when to create, evict and prefetch them.

The executor asks the pool to make a context live before running one of its graphs
(`acquire`) and tells it when the graph is done (`release`). The policy decides the rest:

- eager:      create every context at load; fail like the field does when the PD runs out
- lazy:       create on first use, keep
- bounded:K   at most K live (or `bounded:<bytes>` of PD estimates, e.g. bounded:2GB); evict the live
              context whose next use is farthest away, prefetch the next one on a background thread
- sequential: create, execute, free, one at a time
- auto:       lazy + prefetch until a creation fails for lack of PD / memory; then evict by the same
              rule, retry, and settle on the capacity that works
"""
from __future__ import annotations

import bisect
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from qnnrt._capi.codes import NOT_SUPPORTED
from qnnrt.core import Backend, Context, ContextBinary, Profile
from qnnrt.errors import QnnError, QnnrtError

POLICIES = ("auto", "eager", "lazy", "sequential", "bounded")
_UNITS = {"": 1, "b": 1, "kb": 1 << 10, "k": 1 << 10, "mb": 1 << 20, "m": 1 << 20,
          "gb": 1 << 30, "g": 1 << 30}


@dataclass(frozen=True)
class Residency:
    """A parsed residency policy: `kind`, and for bounded either a count or a byte budget."""
    kind: str
    max_live: int | None = None
    max_bytes: int | None = None

    @classmethod
    def parse(cls, text: "str | Residency") -> "Residency":
        if isinstance(text, Residency):
            return text
        t = str(text).strip().lower()
        if t in ("auto", "eager", "lazy", "sequential"):
            return cls(t)
        m = re.fullmatch(r"bounded:(\d+(?:\.\d+)?)\s*([kmg]?b?)", t)
        if m:
            num, unit = m.group(1), m.group(2)
            if unit:
                return cls("bounded", max_bytes=int(float(num) * _UNITS[unit]))
            if "." in num or int(num) < 1:
                raise QnnrtError(f"residency {text!r}: K must be a whole number >= 1")
            return cls("bounded", max_live=int(num))
        raise QnnrtError(f"unknown residency {text!r}; use auto, eager, lazy, sequential, "
                         f"bounded:K (a count) or bounded:<size> (e.g. bounded:2GB)")

    def __str__(self) -> str:
        if self.kind != "bounded":
            return self.kind
        return f"bounded:{self.max_live}" if self.max_live else f"bounded:{self.max_bytes}B"

    @property
    def prefetches(self) -> bool:
        return self.kind in ("auto", "bounded")


@dataclass
class ResidencyStats:
    creates: int = 0
    frees: int = 0
    evictions: int = 0
    reloads: int = 0
    create_failures: int = 0
    pd_failures_handled: int = 0
    prefetches: int = 0
    prefetch_hits: int = 0
    peak_live: int = 0
    capacity_found: int | None = None
    create_seconds: float = 0.0
    wait_seconds: float = 0.0
    ever_created: set = field(default_factory=set)


class ContextPool:
    """Owns the live contexts of a program and applies a residency policy to them.

    `binaries` maps a context key to its ContextBinary. `hooks` (e.g. the heap profiler) get
    before_create(key), after_create(key, ok, pd_estimate_bytes), after_free(key).
    """

    def __init__(self, backend: Backend, binaries: dict[str, ContextBinary],
                 residency: "Residency | str" = "auto", hooks=None,
                 pd_estimate: Callable[[list[str]], int | None] | None = None,
                 profiler=None):
        self.backend = backend
        self.binaries = binaries
        self.residency = Residency.parse(residency)
        self.hooks = hooks
        self._pd_estimate = pd_estimate
        self._profiler = profiler  # optional: .context_profile() -> Profile, .created(key, events)
        self.stats = ResidencyStats()
        self.estimates: dict[str, int] = {}
        self._live: dict[str, Context] = {}
        self._pending: dict[str, Future] = {}
        self._in_use: dict[str, int] = {}
        self._lock = threading.RLock()
        self._create_lock = threading.Lock()
        self._verbose_users = 0
        self._executor: ThreadPoolExecutor | None = None
        self._order: list[str] = []
        self._positions: dict[str, list[int]] = {}
        self._closed = False
        self.capacity: int | None = self.residency.max_live

    # -- planning ----------------------------------------------------------------------------
    def set_order(self, order: list[str]) -> None:
        """The static order in which the next method run uses contexts (one key per graph call)."""
        if order == self._order:
            return
        self._order = list(order)
        self._positions = {}
        for i, k in enumerate(self._order):
            self._positions.setdefault(k, []).append(i)

    def _next_use(self, key: str, position: int) -> float:
        """Distance from `position` to the next use of `key` in the (cyclic) call order."""
        uses = self._positions.get(key)
        if not uses:
            return float("inf")
        i = bisect.bisect_right(uses, position)
        return uses[i] - position if i < len(uses) else uses[0] + len(self._order) - position

    # -- creation ----------------------------------------------------------------------------
    def _verbose(self, on: bool) -> None:
        # PD estimates appear in QNN's log at verbose level only: raise it around creations
        with self._lock:
            self._verbose_users += 1 if on else -1
            users = self._verbose_users
        if self._pd_estimate is None or self.backend.log_level >= 4:
            return
        if on and users == 1:
            self.backend.set_log_level(4)
        elif not on and users == 0:
            self.backend.set_log_level(self.backend.log_level)

    def _dsp_state(self) -> str:
        """'off', 'probe' (undecided: try option 4 once) or 'on' (device supports it)."""
        dsp = getattr(self.hooks, "dsp", None)
        if dsp is None:
            return "off"
        if not dsp.decided:
            return "probe"
        return "on" if dsp.supported else "off"

    def _new_context(self, key: str, profile) -> Context:
        """Create the context; with a heap profiler, DSP memory profiling is probed on the first
        creation (refused with 1000 on the simulator: noted once, then never asked again)."""
        state = self._dsp_state()
        if state == "off":
            return Context(self.backend, self.binaries[key], name=key, profile=profile)
        try:
            ctx = Context(self.backend, self.binaries[key], name=key, profile=profile,
                          dsp_memory_profiling=True)
        except QnnError as e:
            if state != "probe" or e.code != NOT_SUPPORTED:
                raise
            self.hooks.dsp.mark_unsupported(
                "DSP memory profiling is not supported by this backend (QNN error 1000 on "
                "context creation with HTP context config option 4; the x86 simulator refuses it, "
                "devices support it); host heap values are reported instead")
            return Context(self.backend, self.binaries[key], name=key, profile=profile)
        if state == "probe":
            self.hooks.dsp.mark_supported()
        return ctx

    def _create(self, key: str) -> Context:
        if self.hooks:
            self.hooks.before_create(key)
        self._verbose(True)
        t0 = time.perf_counter()
        profile = self._profiler.context_profile() if self._profiler else None
        dsp_profile = None
        if profile is None and self._dsp_state() != "off":
            dsp_profile = profile = Profile(self.backend, "basic")  # carries the DSP heap events
        try:
            # one creation at a time (prefetch thread vs. main thread): QNN's log lines of a
            # creation, which carry its PD estimate, are then its own
            with self._create_lock:
                ctx = self._new_context(key, profile)
        except BaseException:
            with self._lock:
                self.stats.create_failures += 1
            if self.hooks:
                self.hooks.after_create(key, False, None)
            if profile is not None:
                profile.close()
            raise
        finally:
            self._verbose(False)
        dt = time.perf_counter() - t0
        est = self._pd_estimate(ctx.creation_log) if self._pd_estimate else None
        events = None
        if profile is not None:
            events = profile.events()
            if dsp_profile is None:
                self._profiler.created(key, events)
            profile.close()
        with self._lock:
            if est:
                self.estimates[key] = est
            self.stats.creates += 1
            self.stats.create_seconds += dt
            if key in self.stats.ever_created:
                self.stats.reloads += 1
            self.stats.ever_created.add(key)
        if self.hooks:
            self.hooks.after_create(key, True, est)
            if events is not None and self._dsp_state() == "on":
                self.hooks.record_dsp_events(key, events)
        return ctx

    def _free(self, key: str, evicted: bool) -> None:
        with self._lock:
            ctx = self._live.pop(key, None)
        if ctx is None:
            return
        profile = Profile(self.backend, "basic") if self._dsp_state() == "on" else None
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

    def _note_live(self) -> None:
        self.stats.peak_live = max(self.stats.peak_live, len(self._live))

    # -- eviction ----------------------------------------------------------------------------
    def _live_bytes(self) -> int:
        known = [v for v in self.estimates.values()]
        default = max(known) if known else 0
        return sum(self.estimates.get(k, default) for k in list(self._live) + list(self._pending))

    def _over_budget(self, adding: str | None) -> bool:
        r = self.residency
        count = len(self._live) + len(self._pending) + (1 if adding else 0)
        if self.capacity is not None and count > self.capacity:
            return True
        if r.max_bytes is not None:
            known = list(self.estimates.values())
            extra = self.estimates.get(adding, max(known) if known else 0) if adding else 0
            return self._live_bytes() + extra > r.max_bytes
        return False

    def _victim(self, position: int, keep: set[str]) -> str | None:
        candidates = [k for k in self._live if k not in keep and not self._in_use.get(k)]
        if not candidates:
            return None
        return max(candidates, key=lambda k: (self._next_use(k, position), k))

    def _make_room(self, adding: str, position: int, keep: set[str]) -> None:
        while self._over_budget(adding):
            with self._lock:
                victim = self._victim(position, keep | {adding})
            if victim is None:
                return
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
        with self._lock:
            self._in_use[key] = self._in_use.get(key, 0) + 1
        if self.residency.prefetches:
            self._prefetch_after(position, current=key)
        return ctx

    def release(self, key: str) -> None:
        with self._lock:
            n = self._in_use.get(key, 0) - 1
            if n <= 0:
                self._in_use.pop(key, None)
            else:
                self._in_use[key] = n
        if self.residency.kind == "sequential" and n <= 0:
            self._free(key, evicted=False)

    def _wait_pending(self, key: str) -> Context | None:
        with self._lock:
            fut = self._pending.get(key)
        if fut is None:
            return None
        t0 = time.perf_counter()
        try:
            fut.result()
        except Exception:
            pass  # prefetch failed (e.g. PD): the synchronous path retries with eviction
        self.stats.wait_seconds += time.perf_counter() - t0
        with self._lock:
            ctx = self._live.get(key)
            if ctx is not None:
                self.stats.prefetch_hits += 1
            return ctx

    def _create_with_room(self, key: str, position: int) -> Context:
        keep = {key}
        if self.residency.kind == "sequential":
            # one at a time: anything else live (not executing) goes first
            with self._lock:
                others = [k for k in self._live if k != key and not self._in_use.get(k)]
            for k in others:
                self._free(k, evicted=False)
        else:
            self._make_room(key, position, keep)
        while True:
            try:
                ctx = self._create(key)
            except QnnError as e:
                if not (self.residency.kind in ("auto", "bounded") and e.is_out_of_memory):
                    raise
                with self._lock:
                    live_now = len(self._live)
                    victim = self._victim(position, keep)
                if victim is None:
                    raise QnnrtError(
                        f"context {key!r} cannot be created even with no other context evictable "
                        f"({live_now} live, in use by the running graph): it does not fit in the "
                        f"accelerator's memory on its own.\n{e}") from e
                with self._lock:
                    self.stats.pd_failures_handled += 1
                    cap = max(1, live_now)
                    self.capacity = cap if self.capacity is None else min(self.capacity, cap)
                    self.stats.capacity_found = self.capacity
                self._mark("pd_exhausted", key)
                self._free(victim, evicted=True)
                continue
            with self._lock:
                self._live[key] = ctx
                self._note_live()
            return ctx

    # -- prefetch ----------------------------------------------------------------------------
    def _prefetch_after(self, position: int, current: str) -> None:
        n = len(self._order)
        if n < 2:
            return
        nxt = None
        for d in range(1, n):
            k = self._order[(position + d) % n]
            if k != current:
                nxt = k
                break
        if nxt is None:
            return
        with self._lock:
            if nxt in self._live or nxt in self._pending or self._closed:
                return
        self._make_room(nxt, position, {current, nxt})
        with self._lock:
            if self._over_budget(nxt):
                return  # nothing evictable: create it when it is needed
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1,
                                                    thread_name_prefix="qnnrt-prefetch")
            fut = self._executor.submit(self._prefetch_job, nxt)
            self._pending[nxt] = fut
            self.stats.prefetches += 1

    def _prefetch_job(self, key: str) -> None:
        try:
            ctx = self._create(key)
        except QnnError as e:
            pd = e.is_out_of_memory and self.residency.kind == "auto"
            with self._lock:
                self._pending.pop(key, None)
                if pd:
                    cap = max(1, len(self._live))
                    self.capacity = cap if self.capacity is None else min(self.capacity, cap)
                    self.stats.capacity_found = self.capacity
                    self.stats.pd_failures_handled += 1
            self._mark("pd_exhausted" if pd else "prefetch_failed", key)
            raise
        except BaseException:
            with self._lock:
                self._pending.pop(key, None)
            raise
        with self._lock:
            self._pending.pop(key, None)
            if self._closed:
                discard = True
            else:
                discard = False
                self._live[key] = ctx
                self._note_live()
        if discard:
            ctx.close()
            if self.hooks:
                self.hooks.after_free(key, evicted=False)

    # -- eager / lifetime --------------------------------------------------------------------
    def load_all(self, progress=None) -> None:
        """Create every context now (eager)."""
        for i, key in enumerate(self.binaries):
            if key not in self._live:
                ctx = self._create(key)
                with self._lock:
                    self._live[key] = ctx
                    self._note_live()
            if progress:
                progress(i + 1, len(self.binaries))

    @property
    def live_keys(self) -> list[str]:
        with self._lock:
            return list(self._live)

    def summary(self) -> dict:
        s = self.stats
        return {"policy": str(self.residency), "contexts_total": len(self.binaries),
                "peak_live": s.peak_live, "creates": s.creates, "frees": s.frees,
                "evictions": s.evictions, "reloads": s.reloads,
                "capacity_found": s.capacity_found, "create_failures": s.create_failures,
                "pd_failures_handled": s.pd_failures_handled, "prefetches": s.prefetches,
                "prefetch_hits": s.prefetch_hits,
                "create_seconds": round(s.create_seconds, 6),
                "prefetch_wait_seconds": round(s.wait_seconds, 6),
                "pd_estimate_bytes": dict(self.estimates)}

    def close(self) -> None:
        """Wait for prefetches, then free every live context (newest first). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = list(self._pending.values())
        for f in pending:
            try:
                f.result()
            except Exception:
                pass
        if self._executor:
            self._executor.shutdown(wait=True)
        for key in reversed(self.live_keys):
            try:
                self._free(key, evicted=False)
            except Exception:
                pass
