"""Heap profile of a program across its context lifecycle.

Users ask how much accelerator and host memory their program costs. ExecuTorch answers with a two-line
file (DSP heap before the first context is created, after the last one is freed); its writer depended on
the order of events and never checked after >= before. `HeapProfiler` keeps the whole timeline under one
lock, decides "first create" and "final free" over the program's life (a bounded residency policy frees
and recreates contexts many times), rolls the live counter back on failed creates, and writes the files
once, atomically, at `close()`.

Sources (each says whether it works here, and why not):
- `HostHeapSource`: glibc malloc in-use bytes (`mallinfo2`) and VmRSS; always available on Linux.
- `PdEstimateSource`: sum of QNN's PD size estimates of the live contexts (from QNN's verbose log).
- `DspHeapSource`: the device DSP heap, reported by QNN as profile events when the HTP context custom
  config "DSP memory profiling" (option 4) is set. The x86 simulator refuses it with error 1000; the
  runtime probes once and calls `mark_unsupported(note)`.
"""
from __future__ import annotations

import json
import threading
import time
from collections import Counter
from typing import Any, Callable

from qnnrt.core.clock import CLOCK
from qnnrt.fileio import check_output_path, write_atomic
from qnnrt.profiling.heap_sources import (DSP_AFTER_EVENT, DSP_BEFORE_EVENT, DspHeapSource, HostHeapSource,
                                          PdEstimateSource)

__all__ = ["HeapProfiler"]

# -------------------------------------------------------------------------------------- profiler
def _jsonable(value: Any) -> Any:
    """Marks carry whatever the runtime passes; keep the timeline JSON-serializable."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def _default_sources() -> list[Any]:
    return [HostHeapSource(), PdEstimateSource(), DspHeapSource()]


class HeapProfiler:
    """Heap checkpoints and timeline across a program's context lifecycle. One lock guards all state.

    The runtime calls `before_create` / `after_create` around every context create (also prefetches on
    background threads), `after_free` after every free, `mark` for residency decisions, and `close` once
    when the program closes. Events after `close` are counted and otherwise ignored.
    """

    def __init__(self, sources: list[Any] | None = None, clock: Callable[[], float] = time.perf_counter,
                 path: str | None = None):
        # `path` (heap_profiling_path=) is checked now, so a bad path fails before a long run
        self.path = check_output_path(path, "heap profile") if path is not None else None
        self._lock = threading.Lock()
        self._clock = clock
        self._t0 = clock()
        self._origin_ns = CLOCK()   # the run's trace clock at time 0: aligns the processes' timelines
        self.sources: list[Any] = list(_default_sources() if sources is None else sources)
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"heap source names must be unique: {names}")
        self._timeline: list[dict[str, Any]] = []
        self._live: Counter[str] = Counter()
        self._pending: Counter[str] = Counter()
        self._stats = {"creates": 0, "frees": 0, "failed_creates": 0, "peak_live": 0,
                       "unmatched_frees": 0, "events_after_close": 0, "sample_errors": 0}
        self._warnings: list[str] = []
        self._warnings_dropped = 0
        self._before: dict[str, Any] | None = None       # before_first_create entry
        self._candidate: dict[str, Any] | None = None    # free entry that last brought live to 0
        self._first_context: str | None = None
        self._dsp_before: int | None = None
        self._dsp_before_from_first = False
        self._dsp_after_pending: dict[str, list[int]] = {}
        self._closed = False
        self._final: dict[str, Any] | None = None
        self._written: str | None = None
        self._processes: dict[str, dict[str, Any]] = {}  # other processes' reports (PD workers)
        self._listeners: list[Callable[[str, dict[str, dict[str, int]]], None]] = []

    # -- helpers (lock held) --------------------------------------------------------------------
    @property
    def dsp(self) -> DspHeapSource | None:
        return next((s for s in self.sources if isinstance(s, DspHeapSource)), None)

    @property
    def wants_dsp(self) -> bool:
        """True once the DSP source was probed and is supported: create contexts with option 4 then.

        Undecided counts as False, so the simulator never sees the option outside the one probe.
        """
        dsp = self.dsp
        return dsp is not None and dsp.decided and dsp.supported

    def _pd(self) -> PdEstimateSource | None:
        return next((s for s in self.sources if isinstance(s, PdEstimateSource)), None)

    def _sample(self) -> dict[str, dict[str, int]]:
        values: dict[str, dict[str, int]] = {}
        for s in self.sources:
            if not s.supported:
                continue
            try:
                values[s.name] = {k: int(v) for k, v in s.sample().items()}
            except Exception as e:  # noqa: BLE001 - a broken source must not break the run
                self._stats["sample_errors"] += 1
                self._warn(f"source {s.name!r} failed to sample: {e!r}")
        return values

    def _append(self, event: str, context: str | None, **info: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {"time": round(self._clock() - self._t0, 6), "event": event,
                                 "context": context, "live": sum(self._live.values()),
                                 "values": self._sample()}
        if info:
            entry["info"] = info
        self._timeline.append(entry)
        for listener in self._listeners:
            listener(event, entry["values"])
        return entry

    def listen(self, listener: Callable[[str, dict[str, dict[str, int]]], None]) -> None:
        """`listener(event, values)` hears every sample as it is taken (the tracer's heap counters);
        called with the profiler's lock held, so it must not call back into the profiler."""
        with self._lock:
            if listener not in self._listeners:
                self._listeners.append(listener)

    def _warn(self, text: str) -> None:
        if len(self._warnings) < 50:     # a misbehaving caller must not grow the report without bound
            self._warnings.append(text)
        else:
            self._warnings_dropped += 1

    def _take_before(self, context: str | None) -> None:
        if self._before is None:
            self._first_context = context
            self._before = self._append("before_first_create", context)

    def add_process(self, label: str, report: dict[str, Any]) -> None:
        """The finished report (`to_json`) of another process that held some of the program's
        contexts (a PD worker): the two-line file sums every process's checkpoints, the JSON keeps
        each one's timeline apart under `processes`."""
        with self._lock:
            self._processes[label] = report

    # -- events -------------------------------------------------------------------------------------
    def before_create(self, context: str) -> None:
        """Call right before creating `context`; the first call takes the before checkpoint."""
        with self._lock:
            if self._closed:
                self._stats["events_after_close"] += 1
                return
            self._take_before(context)
            self._pending[context] += 1

    def after_create(self, context: str, ok: bool, pd_estimate_bytes: int | None = None) -> None:
        """Call after the create returned (ok=False on failure: the reservation is rolled back)."""
        with self._lock:
            if self._closed:
                self._stats["events_after_close"] += 1
                return
            if self._pending[context] > 0:
                self._pending[context] -= 1
                if not self._pending[context]:
                    del self._pending[context]
            else:
                self._warn(f"after_create({context!r}) without before_create")
                self._take_before(context)
            if ok:
                self._live[context] += 1
                self._stats["creates"] += 1
                pd = self._pd()
                if pd is not None:
                    pd.on_create(context, pd_estimate_bytes)
                self._stats["peak_live"] = max(self._stats["peak_live"], sum(self._live.values()))
                info = {} if pd_estimate_bytes is None else {"pd_estimate_bytes": int(pd_estimate_bytes)}
                self._append("create", context, **info)
            else:
                self._stats["failed_creates"] += 1
                self._append("create_failed", context)

    def before_free(self, context: str, evicted: bool = False) -> None:
        """Nothing: the free's sample is taken after it (`after_free`)."""

    def after_free(self, context: str, evicted: bool = False) -> None:
        """Call after `context` was freed; when none is live any more, a candidate after checkpoint.

        `evicted=True` (a residency policy made room) also puts an "evict" mark on the timeline.
        """
        with self._lock:
            if self._closed:
                self._stats["events_after_close"] += 1
                return
            if evicted and self._live[context] > 0:
                self._append("evict", context)
            if self._live[context] <= 0:
                self._live.pop(context, None)
                self._stats["unmatched_frees"] += 1
                self._warn(f"after_free({context!r}) for a context that is not live; ignored")
                return
            self._live[context] -= 1
            if not self._live[context]:
                del self._live[context]
            self._stats["frees"] += 1
            pd = self._pd()
            if pd is not None:
                pd.on_free(context)
            entry = self._append("free", context)
            pending = self._dsp_after_pending.get(context)
            if pending:
                self._attach_dsp_after(entry, pending.pop(0))
            if entry["live"] == 0:
                self._candidate = entry

    def mark(self, event: str, **info: Any) -> None:
        """Annotate the timeline (evict, reload, prefetch, ...); `context=` names the context."""
        with self._lock:
            if self._closed:
                self._stats["events_after_close"] += 1
                return
            context = info.pop("context", None)
            self._append(str(event), None if context is None else str(context),
                         **{k: _jsonable(v) for k, v in info.items()})

    # -- DSP values from QNN profile events ---------------------------------------------------------
    def record_dsp_events(self, context: str, events: list[dict[str, Any]]) -> int:
        """Feed the profile events of one create or free of `context`; returns DSP values found.

        QNN reports `DSP:before_context_created` with a create and `DSP:after_context_freed` with a free
        (bytes). The program's "before" is the one reported for its first create, its "after" the one
        reported for the free that left no context live. Works whether called before or after the
        matching `after_create` / `after_free`, provided every free of that context reports a value
        (the natural order is: free, `after_free`, then this with the free's events).
        """
        found = 0
        stack = list(events or [])
        with self._lock:
            dsp = self.dsp
            if dsp is None or self._closed or (dsp.decided and not dsp.supported):
                return 0
            while stack:
                ev = stack.pop(0)
                stack.extend(ev.get("sub") or [])
                name = str(ev.get("name", "")).split(" (")[0].strip()
                if name not in (DSP_BEFORE_EVENT, DSP_AFTER_EVENT):
                    continue
                value = int(ev.get("value", 0))
                dsp.record(value)
                found += 1
                if name == DSP_BEFORE_EVENT:
                    if not self._dsp_before_from_first:
                        if context == self._first_context:
                            self._dsp_before, self._dsp_before_from_first = value, True
                        elif self._dsp_before is None:
                            self._dsp_before = value
                    self._attach_dsp(context, "create", "before_context_created", value)
                else:
                    entry = self._last_entry(context, "free", "after_context_freed")
                    if entry is None:
                        self._dsp_after_pending.setdefault(context, []).append(value)
                    else:
                        self._attach_dsp_after(entry, value)
        return found

    def _last_entry(self, context: str, event: str, missing_key: str) -> dict[str, Any] | None:
        for entry in reversed(self._timeline):
            if entry["event"] == event and entry["context"] == context:
                return None if missing_key in entry["values"].get("dsp", {}) else entry
        return None

    def _attach_dsp(self, context: str, event: str, key: str, value: int) -> None:
        entry = self._last_entry(context, event, key)
        if entry is not None:
            entry["values"].setdefault("dsp", {})[key] = value

    def _attach_dsp_after(self, entry: dict[str, Any], value: int) -> None:
        dsp_values = entry["values"].setdefault("dsp", {})
        dsp_values["after_context_freed"] = value
        dsp_values["dsp_heap"] = value

    # -- close / report -----------------------------------------------------------------------------
    def close(self, path: str | None = None) -> str | None:
        """Finalize once; with `path` (default: the constructor's), write the two-line file and
        `path + '.json'`, once, atomically.

        Returns the path written (also on repeated calls), or None. Bad paths raise QnnrtError; the
        profile stays closed and a later call with a good path still writes it.
        """
        path = path if path is not None else self.path
        with self._lock:
            if not self._closed:
                self._finalize()
            if path is None or self._written is not None:
                return self._written
            final = self._report(with_timeline=True)
            full = check_output_path(path, "heap profile")
            write_atomic(full + ".json", json.dumps(final, indent=1) + "\n", "heap profile timeline")
            write_atomic(full, self._two_lines(final), "heap profile")
            self._written = full
            return full

    def _finalize(self) -> None:
        self._closed = True
        live = sum(self._live.values())
        if self._pending:
            self._warn(f"creates still pending at close: {dict(self._pending)}")
        if self._before is None:
            self._before = self._append("before_first_create", None, note="no context was created")
        if live:
            self._warn(f"{live} context(s) still live at close: {sorted(self._live)}; "
                                  f"'after' is sampled at close instead of after the last free")
            after = self._append("after_last_free", None, note="contexts still live at close")
        elif self._candidate is not None:
            c = self._candidate
            after = {"time": c["time"], "event": "after_last_free", "context": c["context"], "live": 0,
                     "values": json.loads(json.dumps(c["values"]))}
            at = next(i for i, e in enumerate(self._timeline) if e is c)
            self._timeline.insert(at + 1, after)
        else:
            after = self._append("after_last_free", None, note="no context was freed")
        pd = self._pd()
        if pd is not None:
            pd.finalize_note()
        self._final = {"before": self._before, "after": after}

    def _checkpoint_values(self) -> tuple[str, int | None, int | None, str]:
        """(prefix, before, after, why) for the two-line file."""
        assert self._final is not None
        before, after = self._final["before"]["values"], self._final["after"]["values"]
        dsp = self.dsp
        if dsp is not None and dsp.supported:
            b = self._dsp_before if self._dsp_before is not None else before.get("dsp", {}).get("dsp_heap")
            a = after.get("dsp", {}).get("dsp_heap")
            if b is not None and a is not None:
                return "DSP", b, a, "device DSP heap reported by QNN"
            why = "DSP source supported but QNN reported no before/after values; host values written"
        else:
            why = "DSP heap not available" + (f" ({dsp.note})" if dsp is not None else "") + \
                  "; host malloc in-use bytes written"
        return "HOST", before.get("host", {}).get("heap_in_use"), after.get("host", {}).get("heap_in_use"), why

    def _checks(self, prefix: str, b: int | None, a: int | None) -> list[dict[str, Any]]:
        assert self._final is not None
        before, after = self._final["before"]["values"], self._final["after"]["values"]
        checks: list[dict[str, Any]] = []
        checks.append({"check": f"{prefix} after_context_freed >= before_context_created", "before": b,
                       "after": a, "ok": None if a is None or b is None else a >= b})
        for s in self.sources:
            key = getattr(s, "primary", None)
            if not key or s.name in ("dsp", "pd_estimate") or (prefix == "HOST" and s.name == "host"):
                continue
            vb, va = before.get(s.name, {}).get(key), after.get(s.name, {}).get(key)
            if vb is not None and va is not None:
                checks.append({"check": f"{s.name}.{key} after >= before", "before": vb, "after": va,
                               "ok": va >= vb})
        live = sum(self._live.values())
        checks.append({"check": "live contexts at close == 0", "value": live, "ok": live == 0})
        pd_after = after.get("pd_estimate", {}).get("pd_in_use")
        if pd_after is not None and live == 0:
            checks.append({"check": "pd_estimate.pd_in_use == 0 after the last free", "value": pd_after,
                           "ok": pd_after == 0})
        return checks

    def _report(self, with_timeline: bool) -> dict[str, Any]:
        sources = {}
        for s in self.sources:
            sources[s.name] = {"supported": bool(s.supported), "note": s.note}
            if hasattr(s, "details"):
                sources[s.name].update(s.details())
        out: dict[str, Any] = {
            "closed": self._closed,
            "clock_origin_ns": self._origin_ns,
            "sources": sources,
            "stats": dict(self._stats, live=sum(self._live.values()), pending=sum(self._pending.values()),
                          first_context=self._first_context,
                          last_freed_context=self._candidate["context"] if self._candidate else None),
        }
        if self._final is not None:
            prefix, b, a, why = self._checkpoint_values()
            checks = self._checks(prefix, b, a)
            others = [r for r in self._processes.values() if r.get("file_prefix") == prefix]
            if others and b is not None and a is not None:
                if all(r.get("before_context_created") is not None and
                       r.get("after_context_freed") is not None for r in others):
                    out["this_process"] = {"before_context_created": b, "after_context_freed": a}
                    b += sum(r["before_context_created"] for r in others)
                    a += sum(r["after_context_freed"] for r in others)
                    why += f"; summed over this process and {len(others)} PD worker process(es)"
            out.update({"file_prefix": prefix, "file_source": why, "before_context_created": b,
                        "after_context_freed": a, "delta": None if a is None or b is None else a - b,
                        "before_time": self._final["before"]["time"], "after_time": self._final["after"]["time"],
                        "checks": checks, "ok": all(c["ok"] is not False for c in checks)})
            freed = [e for e in self._timeline if e["event"] == "backend_freed"]
            host_after = freed[-1]["values"].get("host", {}).get("heap_in_use") if freed else None
            if host_after is not None and prefix == "HOST" and a is not None and b is not None:
                out["after_backend_freed"] = host_after
                out["host_heap_note"] = (
                    f"the host heap after the last context was freed is {(a - b) / 2**20:+.1f} MiB "
                    f"over the value before the first was created: QNN keeps "
                    f"{(a - host_after) / 2**20:.1f} MiB per backend (state of the contexts it "
                    f"created) until the backend is freed, then returns it; what stays "
                    f"({(host_after - b) / 2**20:+.1f} MiB) is process-global state of the QNN "
                    f"libraries and ONNX Runtime made at first use and reused by later programs "
                    f"(flat over 500 load/close cycles: docs/RELIABILITY.md)")
        out["warnings"] = list(self._warnings) + (
            [f"... and {self._warnings_dropped} more warnings"] if self._warnings_dropped else [])
        if self._written:
            out["path"] = self._written
        if with_timeline:
            out["timeline"] = json.loads(json.dumps(self._timeline))
        if self._processes:
            out["processes"] = {k: (v if with_timeline else {x: y for x, y in v.items() if x != "timeline"})
                                for k, v in self._processes.items()}
        return out

    @staticmethod
    def _two_lines(final: dict[str, Any]) -> str:
        p = final["file_prefix"]
        fmt = lambda v: "unavailable" if v is None else str(int(v))
        return (f"{p}:before_context_created (bytes), {fmt(final['before_context_created'])}\n"
                f"{p}:after_context_freed (bytes), {fmt(final['after_context_freed'])}\n")

    def summary(self) -> dict[str, Any]:
        """Checkpoints, checks, per-source support notes and live-count stats (no timeline)."""
        with self._lock:
            return self._report(with_timeline=False)

    def timeline(self) -> list[dict[str, Any]]:
        with self._lock:
            return json.loads(json.dumps(self._timeline))

    def to_json(self) -> dict[str, Any]:
        """`summary()` plus `timeline`: what the run report stores under `heap`."""
        with self._lock:
            return self._report(with_timeline=True)

    @property
    def live(self) -> int:
        with self._lock:
            return sum(self._live.values())

    @property
    def closed(self) -> bool:
        return self._closed
