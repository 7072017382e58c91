"""Context residency: which contexts are live, when to create, evict and prefetch them.

The executor asks the pool to make a context live before running one of its graphs
(`acquire`) and tells it when the graph is done (`release`). The policy decides the rest:

- eager:      create every context at load; fail like the field does when the PD runs out
- lazy:       create on first use, keep
- bounded:K   at most K live (or `bounded:<bytes>` of PD estimates, e.g. bounded:2GB); evict the live
              context whose next use is farthest away, prefetch the next one on a background thread
- sequential: create, execute, free, one at a time
- auto:       lazy + prefetch; with a known PD budget (given, learned, or the simulator's) and each context's predicted
              PD need (core/pd_need.py) it evicts before creating, by bytes, so it never fails a
              creation; without one, until a creation fails for lack of PD / memory: then the
              capacity is QNN's "available space" + the live reservations (exact), evict, retry
"""
from __future__ import annotations

import bisect
import contextlib
import enum
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from qnnrt.core import Backend, Context, ContextBinary, LogLevel, Profile, live_contexts_in_process
from qnnrt.core.spill_fill import SpillFillGroup
from qnnrt.errors import QnnError, QnnrtError
from qnnrt.profiling.pd_log import pd_available_from_log
from qnnrt.runtime.hooks import CreationProfiler, DspProbe, PoolHooks
from qnnrt.units import SIZE_RE, to_bytes

if TYPE_CHECKING:
    from qnnrt.runtime.vet import StepWatch


class ResidencyKind(enum.StrEnum):
    """The residency policies (module docstring). A StrEnum: `kind == "eager"` still holds."""
    AUTO = "auto"
    EAGER = "eager"
    LAZY = "lazy"
    SEQUENTIAL = "sequential"
    BOUNDED = "bounded"
    MULTI_PD = "multi-pd"    # contexts spread over PD worker processes (runtime/pd_fleet.py)


POLICIES = tuple(str(k) for k in ResidencyKind)


@dataclass(frozen=True)
class Residency:
    """A parsed residency policy: `kind`, and for bounded either a count or a byte budget."""
    kind: ResidencyKind
    max_live: int | None = None
    max_bytes: int | None = None
    pds: int | None = None      # multi-pd:N (None: as many PDs as the placement needs)

    def __post_init__(self) -> None:  # Residency("lazy") from a string is still a ResidencyKind
        object.__setattr__(self, "kind", ResidencyKind(self.kind))

    @classmethod
    def parse(cls, text: str | Residency) -> Residency:
        if isinstance(text, Residency):
            return text
        t = str(text).strip().lower()
        if t in POLICIES and t != ResidencyKind.BOUNDED:
            return cls(ResidencyKind(t))
        m = re.fullmatch(r"bounded:" + SIZE_RE, t)
        if m:
            num, unit = m.group("num"), m.group("unit")
            if unit:
                return cls(ResidencyKind.BOUNDED, max_bytes=to_bytes(num, unit))
            if "." in num or int(num) < 1:
                raise QnnrtError(f"residency {text!r}: K must be a whole number >= 1")
            return cls(ResidencyKind.BOUNDED, max_live=int(num))
        m = re.fullmatch(r"multi-pd(?::(\d+))?", t)
        if m:
            if m.group(1) is not None and int(m.group(1)) < 1:
                raise QnnrtError(f"residency {text!r}: N must be a whole number >= 1")
            return cls(ResidencyKind.MULTI_PD, pds=int(m.group(1)) if m.group(1) else None)
        raise QnnrtError(f"unknown residency {text!r}; use auto, eager, lazy, sequential, "
                         f"bounded:K (a count), bounded:<size> (e.g. bounded:2GB) or multi-pd[:N]")

    def __str__(self) -> str:
        if self.kind == ResidencyKind.MULTI_PD:
            return f"multi-pd:{self.pds}" if self.pds else "multi-pd"
        if self.kind != ResidencyKind.BOUNDED:
            return str(self.kind)
        return f"bounded:{self.max_live}" if self.max_live else f"bounded:{self.max_bytes}B"

    @property
    def prefetches(self) -> bool:
        return self.kind in (ResidencyKind.AUTO, ResidencyKind.BOUNDED)


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
    peak_pd_bytes: int = 0
    capacity_found: int | None = None
    capacity_bytes_found: int | None = None
    peak_predicted_bytes: int | None = None
    create_seconds: float = 0.0
    wait_seconds: float = 0.0
    ever_created: set = field(default_factory=set)


class GraphHandle(Protocol):
    """What a plan reads of a live graph: the handle its calls go to."""
    @property
    def handle(self) -> Any: ...


class LiveContext(Protocol):
    """What a plan reads of a live context: a `Context` here, a PD worker's context elsewhere."""
    @property
    def closed(self) -> bool: ...

    def graph(self, name: str) -> GraphHandle: ...


class ContextSource(Protocol):
    """What plans ask of a pool (`ContextPool`, or the multi-PD pool of runtime/pd_fleet.py)."""

    @property
    def generation(self) -> int:
        """Bumped on every change to what is live."""

    def live_contexts(self, keys: Iterable[str]) -> LiveContexts | None: ...

    def set_order(self, order: list[str]) -> None: ...

    def acquire(self, key: str, position: int = 0) -> LiveContext: ...

    def release(self, key: str, position: int | None = None) -> None: ...


@dataclass(frozen=True)
class LiveContexts:
    """Contexts that were all live at `generation` (the pool bumps it on every change)."""
    generation: int
    contexts: Mapping[str, LiveContext]


class ContextPool:
    """Owns the live contexts of a program and applies a residency policy to them.

    `binaries` maps a context key to its ContextBinary. `hooks` (e.g. the heap profiler) get
    before_create(key), after_create(key, ok, pd_estimate_bytes), after_free(key, evicted) and
    mark(event, context=...). `watch` ("worker" vetting) notes the creation and the first graph
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
        self.spill_fill_group = spill_fill_group   # contexts registered as one spill-fill group
        self._watch = watch
        self._unproven: set[str] = set(watch.keys) if watch is not None else set()
        self._first_run: dict[str, int] = {}  # key -> its note's token while it runs the first time
        self.binaries = binaries
        self.residency = Residency.parse(residency)
        self.hooks = hooks
        self._pd_estimate = pd_estimate
        self._profiler = profiler
        self.stats = ResidencyStats()
        self.estimates: dict[str, int] = {}
        self._live: dict[str, Context] = {}
        self._pending: dict[str, Future] = {}
        # bumped on every change of _live or _pending: a compiled plan that found all its contexts
        # live and nothing pending at generation G skips acquire/release while it is still G
        self.generation = 0
        self.prefetch_wakeups = 0  # prefetch jobs started (the thread woke to create something)
        self._prefetched: set[str] = set()  # created by a prefetch, not used yet
        self._in_use: dict[str, int] = {}
        self._lock = threading.RLock()
        self._create_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._order: list[str] = []
        self._positions: dict[str, list[int]] = {}
        self._closed = False
        self.capacity: int | None = self.residency.max_live
        # PD planning by bytes: predicted need per context (None: unknown), and the budget
        self.predictions: dict[str, int | None] = dict(predictions or {})
        self.budget_bytes = budget_bytes if self.residency.kind == ResidencyKind.AUTO else None
        self.budget_source = budget_source if self.budget_bytes is not None else None
        self._on_capacity = on_capacity
        self.mismatches: dict[str, tuple[int, int]] = {}  # key -> (predicted, QNN-reported)
        self._capacity_bytes: int | None = None  # from the last PD failure's log

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

    def _next_key(self, position: int, current: str) -> str | None:
        """The next context in the (cyclic) order after `position` that is not `current`."""
        n = len(self._order)
        for d in range(1, n):
            k = self._order[(position + d) % n]
            if k != current:
                return k
        return None

    # -- creation ----------------------------------------------------------------------------
    def _dsp(self) -> DspProbe | None:
        return self.hooks.dsp if self.hooks is not None else None

    def _dsp_state(self) -> str:
        """'off', 'probe' (undecided: try option 4 once) or 'on' (device supports it)."""
        dsp = self._dsp()
        if dsp is None:
            return "off"
        if not dsp.decided:
            return "probe"
        return "on" if dsp.supported else "off"

    def _new_context(self, key: str, profile: Profile | None) -> Context:
        """Create the context; with a heap profiler, DSP memory profiling is probed on the first
        creation (refused with 1000 on the simulator: noted once, then never asked again)."""
        if self._watch is not None and key in self._watch.keys:
            from qnnrt.runtime.vet import describe_step, stall_seconds
            b = self.binaries[key]
            with self._watch.step("create", describe_step("create", b.where), stall_seconds(b.size)):
                return self._new_context_now(key, profile)
        return self._new_context_now(key, profile)

    def _new_context_now(self, key: str, profile: Profile | None) -> Context:
        state = self._dsp_state()
        dsp = self._dsp()
        group = self.spill_fill_group
        if state == "off" or dsp is None:
            return Context(self.backend, self.binaries[key], name=key, profile=profile,
                           spill_fill_group=group)
        try:
            ctx = Context(self.backend, self.binaries[key], name=key, profile=profile,
                          dsp_memory_profiling=True, spill_fill_group=group)
        except QnnError as e:
            if state != "probe" or not e.is_not_supported:
                raise
            dsp.mark_unsupported(
                "DSP memory profiling is not supported by this backend (QNN error 1000 on "
                "context creation with HTP context config option 4; the x86 simulator refuses it, "
                "devices support it); host heap values are reported instead")
            return Context(self.backend, self.binaries[key], name=key, profile=profile,
                           spill_fill_group=group)
        if state == "probe":
            dsp.mark_supported()
        return ctx

    def _create(self, key: str) -> Context:
        """Create context `key` (not yet live). Creations never overlap: the QNN log lines of a
        creation, at verbose level around it, are its own, and carry its PD estimate."""
        if self.hooks:
            self.hooks.before_create(key)
        profile = None
        t0 = time.perf_counter()
        try:
            with self._create_lock:
                if self._profiler:
                    profile = self._profiler.context_profile()
                elif self._dsp_state() != "off":
                    profile = Profile(self.backend, "basic")  # carries the DSP heap events
                verbose = self._pd_estimate is not None and self.backend.log_level < LogLevel.VERBOSE
                if verbose:
                    self.backend.set_log_level(LogLevel.VERBOSE)
                mark = self.backend.log.mark()
                with self._lock:
                    live_before = set(self._live)
                try:
                    ctx = self._new_context(key, profile)
                except QnnError as e:
                    if e.is_out_of_memory:
                        self._note_failure(self.backend.log.since(mark), live_before)
                    raise
                finally:
                    if verbose:
                        self.backend.set_log_level(self.backend.log_level)
            dt = time.perf_counter() - t0
            with contextlib.ExitStack() as undo:
                undo.callback(ctx.close)  # never drop a created context without freeing it
                est = self._pd_estimate(ctx.creation_log) if self._pd_estimate else None
                events = profile.events() if profile is not None else None
                if events is not None and self._profiler:
                    self._profiler.created(key, events)
                undo.pop_all()
        except BaseException:
            with self._lock:
                self.stats.create_failures += 1
            if self.hooks:
                self.hooks.after_create(key, False, None)
            raise
        finally:
            if profile is not None:
                profile.close()
        self._count_created(key, est, dt)
        if self.hooks:
            self.hooks.after_create(key, True, est)
            if events is not None and self._dsp_state() == "on":
                self.hooks.record_dsp_events(key, events)
        return ctx

    def _count_created(self, key: str, est: int | None, seconds: float) -> None:
        """Statistics of a creation, and QNN's reported reservation beside the prediction."""
        with self._lock:
            if est:
                self.estimates[key] = est
                pred = self.predictions.get(key)
                if pred is not None and pred != est:
                    self.mismatches[key] = (pred, est)
            self.stats.creates += 1
            self.stats.create_seconds += seconds
            if key in self.stats.ever_created:
                self.stats.reloads += 1
            self.stats.ever_created.add(key)

    def _reserved(self, key: str) -> int | None:
        """What QNN reserves for `key`: its reported reservation, else the prediction."""
        return self.estimates.get(key) or self.predictions.get(key)

    def _need(self, key: str) -> int:
        """Bytes to plan with for `key` (prediction, else QNN's report, else the largest known)."""
        v = self.predictions.get(key) or self.estimates.get(key)
        if v:
            return v
        known = [x for x in list(self.predictions.values()) + list(self.estimates.values()) if x]
        return max(known, default=0)

    def _note_failure(self, lines: list[str], live_before: set[str]) -> None:
        """A creation failed for lack of PD: the capacity is the live reservations + the space QNN
        said was available, exactly, when the live set did not change during the attempt."""
        avail = pd_available_from_log(lines)
        with self._lock:
            live = set(self._live)
            parts = [self._reserved(k) for k in live]
            parts += self._others_needs()  # other programs' contexts hold the same PD
            if avail is None or live != live_before or any(p is None for p in parts):
                self._capacity_bytes = None
            else:
                self._capacity_bytes = sum(parts) + avail  # type: ignore[arg-type]

    def _others_needs(self) -> list[int | None]:
        """Predicted reservations of the live contexts of other programs in this process: the PD is
        the process's, so they count against the budget (lock held)."""
        mine = {id(c) for c in self._live.values()}
        return [c.binary.pd_need().total for c in live_contexts_in_process() if id(c) not in mine]

    def byte_budget(self) -> int | None:
        """The byte budget the pool plans with (bounded:<bytes> and/or the PD budget), or None."""
        vals = [v for v in (self.residency.max_bytes, self.budget_bytes) if v is not None]
        return min(vals) if vals else None

    def _free(self, key: str, evicted: bool, ctx: Context | None = None) -> None:
        """Free live context `key` (or `ctx`, a created context that never became live)."""
        if ctx is None:
            with self._lock:
                ctx = self._live.pop(key, None)
                self._prefetched.discard(key)
                self.generation += 1
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

    def _insert(self, key: str, ctx: Context) -> None:
        with self._lock:
            self._live[key] = ctx
            self.generation += 1
            self._note_peaks()

    def _note_peaks(self) -> None:
        """Peak live contexts and peak PD in use (sum of live contexts' estimates); lock held."""
        self.stats.peak_live = max(self.stats.peak_live, len(self._live))
        pd = sum(self.estimates.get(k, 0) for k in self._live)
        self.stats.peak_pd_bytes = max(self.stats.peak_pd_bytes, pd)
        preds = [self.predictions.get(k) for k in self._live]
        if all(p is not None for p in preds):
            self.stats.peak_predicted_bytes = max(self.stats.peak_predicted_bytes or 0,
                                                  sum(preds))  # type: ignore[arg-type]

    def _found_capacity(self, live_now: int) -> None:
        """A creation failed for lack of PD: plan by the exact byte capacity when the failure line
        gave it (and remember it), else by the live count as before."""
        learned = None
        with self._lock:
            cap = max(1, live_now)
            self.stats.capacity_found = cap if self.stats.capacity_found is None \
                else min(self.stats.capacity_found, cap)
            self.stats.pd_failures_handled += 1
            if self._capacity_bytes is not None:
                learned = self._capacity_bytes
                self._capacity_bytes = None
                self.budget_bytes, self.budget_source = learned, "found"
                self.stats.capacity_bytes_found = learned
            else:
                self.capacity = cap if self.capacity is None else min(self.capacity, cap)
        if learned is not None and self._on_capacity is not None:
            self._on_capacity(learned)

    # -- eviction ----------------------------------------------------------------------------
    def _over_budget(self, adding: str | None) -> bool:
        with self._lock:
            count = len(self._live) + len(self._pending) + (1 if adding else 0)
            if self.capacity is not None and count > self.capacity:
                return True
            limits = [] if self.residency.max_bytes is None else [self.residency.max_bytes]
            if self.budget_bytes is not None:
                limits.append(self.budget_bytes - sum(n or 0 for n in self._others_needs()))
            if not limits:
                return False
            limit = min(limits)
            keys = list(self._live) + list(self._pending) + ([adding] if adding else [])
            return sum(self._need(k) for k in keys) > limit

    def _victim(self, position: int, keep: set[str]) -> str | None:
        """The live, idle context (not in `keep`) whose next use is farthest away."""
        with self._lock:
            candidates = [k for k in self._live if k not in keep and not self._in_use.get(k)]
        if not candidates:
            return None
        return max(candidates, key=lambda k: (self._next_use(k, position), k))

    def _make_room(self, adding: str, position: int, keep: set[str]) -> bool:
        """Evict until `adding` fits; False when nothing more is evictable."""
        while self._over_budget(adding):
            victim = self._victim(position, keep | {adding})
            if victim is None:
                return False
            self._free(victim, evicted=True)
        return True

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
        if key in self._unproven:
            self._note_first_run(key)
        with self._lock:
            self._in_use[key] = self._in_use.get(key, 0) + 1
            if key in self._prefetched:
                self._prefetched.discard(key)
                self.stats.prefetch_hits += 1
        if self.residency.prefetches:
            with contextlib.ExitStack() as undo:
                undo.callback(self.release, key)  # the caller never gets the context: do not pin it
                self._prefetch(position, current=key, current_busy=True)
                undo.pop_all()
        return ctx

    def release(self, key: str, position: int | None = None) -> None:
        """The graph call at `position` that used `key` is done."""
        if key in self._first_run:
            self._unproven.discard(key)
            if self._watch is not None:
                self._watch.end(self._first_run.pop(key))
        with self._lock:
            n = self._in_use.get(key, 0) - 1
            if n <= 0:
                self._in_use.pop(key, None)
            else:
                self._in_use[key] = n
        if self.residency.kind == ResidencyKind.SEQUENTIAL and n <= 0:
            self._free(key, evicted=False)
        elif self.residency.prefetches and position is not None and not self._closed:
            # `key` is idle now: if it is the best victim, the next context can replace it
            # while the CPU work between graph calls runs
            self._prefetch(position, current=key, current_busy=False)

    def _note_first_run(self, key: str) -> None:
        """"worker" vetting: the first run of a watched context's graph is a risky step."""
        if self._watch is None or key in self._first_run:
            return
        from qnnrt.runtime.vet import describe_step, stall_seconds
        b = self.binaries[key]
        graphs = b.info.graphs
        what = describe_step("first-run", b.where, graphs[0].name if len(graphs) == 1 else "")
        # the same stall limit as the vetting child's run of a graph: scaled by the binary's bytes
        self._first_run[key] = self._watch.begin("first-run", what, stall_seconds(b.size))

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
        if self.residency.kind == ResidencyKind.SEQUENTIAL:
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
                if not (self.residency.kind in (ResidencyKind.AUTO, ResidencyKind.BOUNDED)
                        and e.is_out_of_memory):
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
        """Start creating the next context of the order on the background thread.

        While `current` executes it cannot be evicted, so the farthest-used idle context goes
        instead, even when the running one would be the better victim: that costs at most one
        extra creation per iteration (tests/runtime/test_residency_policy.py bounds it against
        Belady's optimum) and buys overlap of every creation with a graph execution (the latency
        it saves: bench/RESULTS.md, "Prefetch during the graph call"). Called again at release
        (`current_busy` False) for the case nothing idle could be evicted during the execution.
        """
        nxt = self._next_key(position, current)
        if nxt is None:
            return
        with self._lock:
            if self._closed or nxt in self._live or nxt in self._pending:
                return
        while self._over_budget(nxt):
            victim = self._victim(position, {nxt, current} if current_busy else {nxt})
            if victim is None:
                return  # nothing evictable now: at release, or create it when it is needed
            self._free(victim, evicted=True)
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
            pd = (isinstance(e, QnnError) and e.is_out_of_memory
                  and self.residency.kind == ResidencyKind.AUTO)
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
                self._note_peaks()
        if discard:
            self._free(key, evicted=False, ctx=ctx)

    # -- eager / lifetime --------------------------------------------------------------------
    def load_all(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Create every context now (eager)."""
        for i, key in enumerate(self.binaries):
            if key not in self._live:
                self._insert(key, self._create(key))
            if progress:
                progress(i + 1, len(self.binaries))

    def live_contexts(self, keys: Iterable[str]) -> LiveContexts | None:
        """The contexts of `keys` and the generation they were read at, when every one is live and
        nothing is pending (the state a plan may run in without acquire/release), else None."""
        with self._lock:
            if self._closed or self._pending or any(k not in self._live for k in keys):
                return None
            if self._unproven and not self._unproven.isdisjoint(keys):
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

    def recreate(self, keys: list[str], restart_backend: bool = False) -> list[str]:
        """Free and create again the live contexts `keys` (with `restart_backend`, every live
        context, around a restart of the backend and device), after a graph call failed in a way
        re-creation can cure. The live set is the same afterwards and nothing is pending, so a plan
        that ran with all its contexts live may re-bind and go on; in-use marks are kept (their
        callers release them as usual). Returns the keys re-created, in order."""
        if self._closed:
            raise QnnrtError("program is closed")
        with self._lock:
            pending = list(self._pending.values())
        for fut in pending:  # a prefetch in flight finishes first (it may fail: then it is not live)
            try:
                fut.result()
            except Exception:  # noqa: BLE001 - a failed prefetch leaves the context not live
                pass
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
                "prefetch_wait_seconds": round(s.wait_seconds, 6),
                "pd_estimate_bytes": dict(self.estimates),
                "pd_estimate_total_bytes": sum(self.estimates.values()),
                "pd_peak_bytes": s.peak_pd_bytes,
                "pd_predicted_bytes": dict(self.predictions),
                "pd_predicted_total_bytes": self._predicted_total(),
                "pd_peak_predicted_bytes": s.peak_predicted_bytes,
                "pd_mismatches": [{"key": k, "predicted_bytes": p, "reported_bytes": r}
                                  for k, (p, r) in self.mismatches.items()],
                "pd_budget_bytes": self.byte_budget(), "pd_budget_source":
                    self.budget_source or ("bounded" if self.residency.max_bytes else None),
                "capacity_bytes_found": s.capacity_bytes_found}

    def _predicted_total(self) -> int | None:
        """The sum of the predicted PD needs, when every context has one."""
        needs = [v for v in self.predictions.values() if v is not None]
        return sum(needs) if self.predictions and len(needs) == len(self.predictions) else None

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
