"""How a pool creates one context: serialized, with the QNN log at verbose level around it (its PD
estimate is read there), a creation profile when asked, the DSP memory probe and the vetting watch
(which also notes each watched context's first run). What to create and when is the pool's and its
policy's."""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qnnrt.core import Backend, Context, ContextBinary, LogLevel, Profile
from qnnrt.core.spill_fill import SpillFillGroup
from qnnrt.errors import QnnError
from qnnrt.runtime.hooks import CreationProfiler, DspProbe, PoolHooks, ProfileEvents

if TYPE_CHECKING:
    from qnnrt.runtime.vet.watch import StepWatch


@dataclass(frozen=True)
class Created:
    """A new context, the seconds its creation took, QNN's PD estimate and its profile events."""
    context: Context
    seconds: float
    estimate: int | None
    events: ProfileEvents | None


class ContextMaker:
    """Creates the contexts of one pool. Creations never overlap (a lock): the QNN log lines of a
    creation are its own, so they carry its PD estimate, and a failure's lines its PD figures.
    `on_out_of_memory(lines, live_before)` hears of a creation that failed for lack of PD, with the
    log lines of the attempt and the live keys (`live_keys()`) when it started."""

    def __init__(self, backend: Backend, binaries: dict[str, ContextBinary], hooks: PoolHooks | None,
                 pd_estimate: Callable[[list[str]], int | None] | None,
                 profiler: CreationProfiler | None, watch: StepWatch | None,
                 spill_fill_group: SpillFillGroup | None, live_keys: Callable[[], set[str]],
                 on_out_of_memory: Callable[[list[str], set[str]], None]) -> None:
        self.backend, self.binaries, self.hooks = backend, binaries, hooks
        self.spill_fill_group = spill_fill_group   # contexts registered as one spill-fill group
        self._pd_estimate, self._profiler, self._watch = pd_estimate, profiler, watch
        self._live_keys, self._on_out_of_memory = live_keys, on_out_of_memory
        self._lock = threading.Lock()

    def _dsp(self) -> DspProbe | None:
        return self.hooks.dsp if self.hooks is not None else None

    def dsp_state(self) -> str:
        """'off', 'probe' (undecided: try option 4 once) or 'on' (device supports it)."""
        dsp = self._dsp()
        if dsp is None:
            return "off"
        if not dsp.decided:
            return "probe"
        return "on" if dsp.supported else "off"

    def make(self, key: str) -> Created:
        """Create context `key`; the caller makes it live (or frees it)."""
        profile = None
        t0 = time.perf_counter()
        try:
            with self._lock:
                if self._profiler:
                    profile = self._profiler.context_profile()
                elif self.dsp_state() != "off":
                    profile = Profile(self.backend, "basic")  # carries the DSP heap events
                ctx = self._make_logged(key, profile)
            seconds = time.perf_counter() - t0
            with contextlib.ExitStack() as undo:
                undo.callback(ctx.close)  # never drop a created context without freeing it
                est = self._pd_estimate(ctx.creation_log) if self._pd_estimate else None
                events = profile.events() if profile is not None else None
                if events is not None and self._profiler:
                    self._profiler.created(key, events)
                undo.pop_all()
        finally:
            if profile is not None:
                profile.close()
        return Created(ctx, seconds, est, events)

    def _make_logged(self, key: str, profile: Profile | None) -> Context:
        """The creation, at verbose log level when the PD estimate is read from the log (lock held)."""
        verbose = self._pd_estimate is not None and self.backend.log_level < LogLevel.VERBOSE
        if verbose:
            self.backend.set_log_level(LogLevel.VERBOSE)
        mark = self.backend.log.mark()
        live_before = self._live_keys()
        try:
            return self._watched(key, profile)
        except QnnError as e:
            if e.is_out_of_memory:
                self._on_out_of_memory(self.backend.log.since(mark), live_before)
            raise
        finally:
            if verbose:
                self.backend.set_log_level(self.backend.log_level)

    def _watched(self, key: str, profile: Profile | None) -> Context:
        """With "worker" vetting, a watched context's creation is a risky step."""
        if self._watch is not None and key in self._watch.keys:
            from qnnrt.runtime.vet.policy import describe_step, stall_seconds
            b = self.binaries[key]
            with self._watch.step("create", describe_step("create", b.where), stall_seconds(b.size)):
                return self._new_context(key, profile)
        return self._new_context(key, profile)

    def _new_context(self, key: str, profile: Profile | None) -> Context:
        """With a heap profiler, DSP memory profiling is probed on the first creation (refused with
        1000 on the simulator: noted once, then never asked again)."""
        state = self.dsp_state()
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


class FirstRuns:
    """"worker" vetting: the first run of a watched context's graph is a risky step, noted from
    acquire to release. Until a context ran once it is `unproven`, and plans go through acquire /
    release for it (where the note is written)."""

    def __init__(self, watch: StepWatch | None, binaries: dict[str, ContextBinary]) -> None:
        self._watch, self.binaries = watch, binaries
        self.unproven: set[str] = set(watch.keys) if watch is not None else set()
        self._tokens: dict[str, int] = {}  # key -> its note's token while it runs the first time

    def begin(self, key: str) -> None:
        if self._watch is None or key in self._tokens:
            return
        from qnnrt.runtime.vet.policy import describe_step, run_stall_seconds
        b = self.binaries[key]
        graphs = b.info.graphs
        what = describe_step("first-run", b.where, graphs[0].name if len(graphs) == 1 else "")
        # the vetting child's limit for a graph's run: the binary's bytes and the graph's I/O
        io = max(sum(t.nbytes for t in (*g.inputs, *g.outputs)) for g in graphs) if graphs else 0
        self._tokens[key] = self._watch.begin("first-run", what, run_stall_seconds(b.size, io))

    def end(self, key: str) -> None:
        if key in self._tokens:
            self.unproven.discard(key)
            if self._watch is not None:
                self._watch.end(self._tokens.pop(key))
