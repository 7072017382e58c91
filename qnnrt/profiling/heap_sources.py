"""Where the heap profiler (heap.py) reads memory in use: the host heap and RSS, QNN's PD estimates of
the live contexts, the device DSP heap (profile events, when QNN reports them). Each source says
whether it works here, and why not."""
from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

from qnnrt._capi.libc import mallinfo_reader

# Identifiers QNN gives the DSP heap checkpoints in the context-create / context-free profiles.
DSP_BEFORE_EVENT = "DSP:before_context_created"
DSP_AFTER_EVENT = "DSP:after_context_freed"


@runtime_checkable
class HeapSource(Protocol):
    """Something that reports memory in use, in bytes. `primary` (optional) names the headline key."""

    name: str
    supported: bool
    note: str

    def sample(self) -> dict[str, int]: ...


# --------------------------------------------------------------------------------------------- host
class HostHeapSource:
    """Host process heap: malloc in-use bytes (arena + mmapped chunks) and resident set size.

    QNN's host side (context binaries, graph runlists, I/O buffers) allocates through malloc, so the
    in-use figure tracks what the contexts cost on the host; RSS adds mapped files and libraries.
    """

    name = "host"
    primary = "heap_in_use"

    def __init__(self, libc: Any = None, status_path: str = "/proc/self/status"):
        self._status_path = status_path
        self._mallinfo: Callable[[], Any] | None = None
        self._wraps = False
        notes = []
        self._mallinfo, self._wraps, note = mallinfo_reader(libc)
        notes.append(note)
        self._has_rss = self._read_rss() is not None
        notes.append("rss from VmRSS" if self._has_rss else f"no VmRSS in {status_path}")
        self.supported = self._mallinfo is not None or self._has_rss
        self.note = "; ".join(notes)

    def _read_rss(self) -> int | None:
        try:
            with open(self._status_path, "rb") as f:
                for line in f:
                    if line.startswith(b"VmRSS:"):
                        parts = line.split()
                        return int(parts[1]) * 1024  # kB
        except (OSError, ValueError, IndexError):
            return None
        return None

    def heap_in_use(self) -> int | None:
        if self._mallinfo is None:
            return None
        m = self._mallinfo()
        used = int(m.uordblks) + int(m.hblkhd)
        if self._wraps:
            used = (int(m.uordblks) & 0xFFFFFFFF) + (int(m.hblkhd) & 0xFFFFFFFF)
        return used

    def sample(self) -> dict[str, int]:
        out: dict[str, int] = {}
        used = self.heap_in_use()
        if used is not None:
            out["heap_in_use"] = used
        rss = self._read_rss() if self._has_rss else None
        if rss is not None:
            out["rss"] = rss
        return out


# ---------------------------------------------------------------------------------------------- PD
class PdEstimateSource:
    """PD (accelerator address space) in use: the sum of QNN's size estimates of the live contexts.

    The simulator and devices refuse a create once the PD budget is spent, so this is the number that
    explains "Failed to find available PD". Fed by `HeapProfiler` on create/free; an estimate given for
    one create of a context is reused for its later recreates (the estimate is a property of the binary).
    """

    name = "pd_estimate"
    primary = "pd_in_use"
    supported = True

    def __init__(self) -> None:
        self._known: dict[str, int] = {}
        self._live: dict[str, list[int | None]] = {}
        self.note = "sum of live contexts' 'estimated PD size requirement' (QNN verbose log)"

    def on_create(self, context: str, estimate: int | None) -> None:
        if estimate is not None:
            self._known[context] = int(estimate)
        self._live.setdefault(context, []).append(self._known.get(context))

    def on_free(self, context: str) -> None:
        stack = self._live.get(context)
        if stack:
            stack.pop()
            if not stack:
                del self._live[context]

    def sample(self) -> dict[str, int]:
        return {"pd_in_use": sum(e or 0 for stack in self._live.values() for e in stack)}

    def details(self) -> dict[str, Any]:
        unknown = sorted(c for c, stack in self._live.items() if any(e is None for e in stack))
        return {"estimates": dict(sorted(self._known.items())), "live_without_estimate": unknown}

    def finalize_note(self) -> None:
        if not self._known:
            self.note += ("; no estimate was seen (QNN logs them at log level VERBOSE only), "
                          "so pd_in_use stays 0")


# --------------------------------------------------------------------------------------------- DSP
class DspHeapSource:
    """Device DSP heap, as QNN reports it with DSP memory profiling (HTP context custom config 4).

    Support is decided once by the runtime: it probes context creation with the option and calls
    `mark_unsupported(note)` when QNN refuses (error 1000 on the x86 simulator), or `mark_supported()`.
    Values arrive as the profile events `DSP:before_context_created` / `DSP:after_context_freed` (see
    `HeapProfiler.record_dsp_events`) or as plain readings through `record(bytes)`.
    """

    name = "dsp"
    primary = "dsp_heap"

    def __init__(self) -> None:
        self.supported = False
        self.decided = False
        self.note = "DSP memory profiling was not probed"
        self.last: int | None = None

    def mark_unsupported(self, note: str) -> None:
        self.supported, self.decided, self.note = False, True, note or "not supported"

    def mark_supported(self, note: str = "") -> None:
        self.supported, self.decided = True, True
        self.note = note or "QNN DSP memory profiling (HTP context custom config option 4)"

    def record(self, value: int) -> None:
        """A current DSP heap reading in bytes. Implies support unless already refused."""
        if not self.decided:
            self.mark_supported()
        if self.supported:
            self.last = int(value)

    def sample(self) -> dict[str, int]:
        return {"dsp_heap": self.last} if self.supported and self.last is not None else {}
