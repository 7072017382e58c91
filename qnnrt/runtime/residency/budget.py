"""The PD budget of a backend: known (the x86 simulator's, measured), or learned once from a run that
found it and remembered in the user cache.

A budget is a property of the device (SoC, HTP arch, QNN build), not a constant: the x86 simulator
gives one PD of 3,650,722,201 B (floor(3.4 GiB)), devices differ (several PDs, other processes). When
a creation fails for lack of PD, QNN states the space left ("available space A"): the capacity is the
live contexts' reservations + A, exactly. It is stored per backend identity in
$QNNRT_CACHE_DIR (or $XDG_CACHE_HOME/qnnrt, or ~/.cache/qnnrt) / pd_budget.json, or $QNNRT_PD_BUDGET_FILE.
`probe_capacity` finds it on demand (`qnnrt doctor --probe-pd`): small contexts until the PD is full.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from qnnrt import soc as socs
from qnnrt.core import LogLevel, QnnLibrary
from qnnrt.core.backend import Backend, backend_build_id
from qnnrt.core.binary import ContextBinary
from qnnrt.core.context import Context
from qnnrt.errors import QnnError, QnnrtError
from qnnrt.fileio import default_cache_dir, read_json, write_atomic
from qnnrt.profiling.pd_log import pd_available_from_log, pd_estimate_from_log

SIMULATOR_CAPACITY = socs.SIMULATOR_PD_CAPACITY  # one PD on the x86 HTP simulator (QNN 2.51), measured
CACHE_FILE = "pd_budget.json"
DEFAULT_MAX_PDS = 4   # PDs (worker processes) `auto` may spread a program over; beyond it, one PD evicts


def cache_file() -> Path:
    """$QNNRT_PD_BUDGET_FILE, else pd_budget.json in the user cache folder."""
    env = os.environ.get("QNNRT_PD_BUDGET_FILE")
    return Path(env) if env else default_cache_dir() / CACHE_FILE




def backend_identity(lib: QnnLibrary, soc_model: int | None) -> str:
    """'<SoC>/v<arch>/<QNN build id>': what a learned budget is valid for."""
    s = socs.BY_MODEL.get(soc_model) if soc_model is not None else None
    name = s.name if s else (f"soc{soc_model}" if soc_model is not None else "default-soc")
    arch = f"v{s.htp_arch}" if s and s.htp_arch else "v?"
    host = "sim" if lib.is_simulator else "device"  # by the loaded library, not the host arch
    return f"{name}/{arch}/{backend_build_id(lib) or 'unknown-build'}/{host}"


@dataclass(frozen=True)
class Budget:
    """A PD budget and where it came from: 'override', 'learned', 'simulator' or 'bounded'."""
    bytes: int
    source: str

    def describe(self) -> str:
        what = {"override": "given", "learned": f"learned on this backend (cache {cache_file()})",
                "simulator": "the x86 simulator's PD (QNN 2.51, measured)",
                "bounded": "the bounded:<bytes> residency"}.get(self.source, self.source)
        return f"{self.bytes} B ({what})"


def _read() -> dict:
    p = cache_file()
    if not p.exists():
        return {}
    try:
        data = read_json(p, "PD budget cache")
    except QnnrtError:  # a damaged cache is forgotten, never fatal
        return {}
    return data if isinstance(data, dict) else {}


def learned_budget(identity: str) -> int | None:
    entry = _read().get(identity)
    if isinstance(entry, dict) and isinstance(entry.get("capacity_bytes"), int):
        return entry["capacity_bytes"]
    return None


def remember_budget(identity: str, capacity: int) -> str | None:
    """Store the capacity found for `identity`; the cache path, or None when it cannot be written
    (a cache is a convenience: a read-only home never fails a run)."""
    f = cache_file()
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        data = _read()
        data[identity] = {"capacity_bytes": int(capacity), "learned_at": int(time.time())}
        return write_atomic(f, json.dumps(data, indent=1, sort_keys=True) + "\n",
                            "PD budget cache")
    except (OSError, QnnrtError):
        return None


def known_budget(identity: str) -> Budget | None:
    """A budget known before any run: the x86 simulator's, measured (a device's is learned)."""
    return Budget(SIMULATOR_CAPACITY, "simulator") if identity.endswith("/sim") else None


def resolve_budget(identity: str, override: int | None = None) -> Budget | None:
    """The budget to plan with: an override, else the learned one, else a known one (the
    simulator's, from the very first run); None when unknown (a device before its first PD
    failure)."""
    if override is not None:
        return Budget(int(override), "override")
    learned = learned_budget(identity)
    if learned is not None:
        return Budget(learned, "learned")
    return known_budget(identity)


@dataclass
class PdProbe:
    capacity_bytes: int | None   # the live reservations + the space QNN said was left
    contexts: int                # created before the one that failed
    reservation_bytes: int | None
    seconds: float
    note: str

    def to_dict(self) -> dict:
        return asdict(self)


def probe_capacity(backend: Backend, binary: ContextBinary, limit: int = 20000) -> PdProbe:
    """Create contexts of `binary` until the PD is full (QNN error 1002, "Failed to find available
    PD"), then free them all. The capacity is exact: the reservations QNN logged for the live
    contexts plus the "available space" it stated when the next one did not fit."""
    saved = backend.log_level
    backend.set_log_level(LogLevel.VERBOSE)  # the reservation lines
    live: list[Context] = []
    reserved: list[int | None] = []
    t0 = time.perf_counter()
    try:
        while len(live) < limit:
            mark = backend.log.mark()
            try:
                c = Context(backend, binary, name=f"pd-probe-{len(live)}")
            except QnnError as e:
                if not e.is_out_of_memory:
                    raise
                avail = pd_available_from_log(backend.log.since(mark))
                known = None if any(r is None for r in reserved) else sum(r for r in reserved if r)
                cap = known + avail if known is not None and avail is not None else None
                note = ("live reservations + the available space QNN stated" if cap is not None else
                        f"error {e.code} after {len(live)} contexts, but QNN's log did not state the "
                        f"reservations and the space left")
                return PdProbe(cap, len(live), reserved[0] if reserved else None,
                               time.perf_counter() - t0, note)
            live.append(c)
            reserved.append(pd_estimate_from_log(c.creation_log))
        return PdProbe(None, len(live), reserved[0] if reserved else None, time.perf_counter() - t0,
                       f"{limit} contexts fit without filling the PD; capacity not found")
    finally:
        for c in reversed(live):
            c.close()
        backend.set_log_level(saved)
