"""Vetting context binaries qnnrt did not write: the policy (what runs where, when a step is a hang).

QNN parses context binaries in native code without a checksum; a corrupt one can crash (SIGSEGV)
or hang it in systemContextGetBinaryInfo, contextCreateFromBinary or, rarely, graphExecute. The
promise: no such crash takes the user's process down, and a valid artifact is never refused.

Modes (`LoadOptions.vet`, `VetMode`):
- "auto" (= True, the API default): a spawned child (vet/child.py) reads each binary's info, creates
  and frees its context, and runs on zeros only the graphs that are cheap to run (binary + graph
  I/O bytes within QNNRT_VET_EXECUTE_BYTES): the fuzz corpus's graphs run there, an LLM's do not.
- "execute": the child runs every graph once on zeros (a whole extra forward pass of a big model).
- "create": the child reads info and creates contexts only.
- "worker": no child. The calling process is itself a disposable worker (the CLI's, cli/process.py)
  whose parent turns a crash into an error: the risky steps (info, create, first run of a context's
  graph) are written to the small file QNNRT_VET_STEP_FILE names, so the parent can say which binary
  and step crashed or stalled. Without that file it falls back to "auto".
- False: nothing (trusted files).
Hangs are found by progress, never by a whole-job timeout: the child reports each step as it starts,
and only a step that makes no progress for its stall timeout (QNNRT_VET_STALL_TIMEOUT seconds, scaled
up by the bytes the step works on) is a hang; the message names the step and says a stall is not a
verdict on the binary. Verdicts are cached by content hash (+ QNN library + mode) under the user
cache folder; binaries with equal bytes are vetted once. The hash itself comes from the load cache
(core/load_cache.py) while the file is unchanged, so a cached verdict costs no pass over the bytes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal

from qnnrt.errors import FormatError, QnnrtError
from qnnrt.runtime.ipc import child
from qnnrt.runtime.vet.protocol import JOB_ID, WIRE, ItemDone, JobDone, StepStarted, VetItem, VetJob
from qnnrt.spawn import signal_name
from qnnrt.fileio import default_cache_dir, loads_json, write_atomic

if TYPE_CHECKING:
    from qnnrt.core.binary import ContextBinary

VetMode = Literal["auto", "execute", "create", "worker"]
VET_MODES: tuple[VetMode, ...] = ("auto", "execute", "create", "worker")
STALL_ENV = "QNNRT_VET_STALL_TIMEOUT"        # seconds a step may go without progress (base)
EXECUTE_BYTES_ENV = "QNNRT_VET_EXECUTE_BYTES"  # "auto" runs a graph when binary + I/O fit this
STEP_FILE_ENV = "QNNRT_VET_STEP_FILE"        # "worker": the file the parent reads the steps from
DEFAULT_STALL_S = 120.0
STALL_SCALE_BYTES = 256 << 20    # the stall timeout grows by its base per this many bytes
RUN_STALL_IO_BYTES = 4 << 20     # a graph's run: and by its base per this many bytes of its I/O
DEFAULT_EXECUTE_BYTES = 256 << 10
STARTUP_S = 60.0
VERDICT_VERSION = 2
_ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding this qnnrt package

Progress = Callable[[int, int], None]


def vet_mode(value: bool | str) -> VetMode | None:
    """The mode `LoadOptions.vet` asks for (True is "auto"), None for no vetting."""
    if value is True:
        return "auto"
    if value is False or value is None:
        return None
    if value in VET_MODES:
        return value
    raise QnnrtError(f"unknown vet mode {value!r}; use True, False or one of {', '.join(VET_MODES)}")


def _env_number(name: str, default: float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise QnnrtError(f"{name}={text!r} is not a number") from None
    if not value > 0:
        raise QnnrtError(f"{name}={text!r} must be > 0")
    return value


def stall_base() -> float:
    return _env_number(STALL_ENV, DEFAULT_STALL_S)


def stall_seconds(nbytes: int) -> float:
    """How long a step over `nbytes` may go without progress before it is a hang."""
    return stall_base() * (1.0 + nbytes / STALL_SCALE_BYTES)


def run_stall_seconds(binary_bytes: int, io_bytes: int) -> float:
    """How long a graph's run may go without progress: as any step over the binary, plus the base
    per RUN_STALL_IO_BYTES of the tensors it reads and writes. graphExecute reports no progress,
    and its time grows with the activations, not the binary: on the x86 simulator (~1-3 us per
    element of each op) a decoder layer at sequence 1024 runs for minutes, legitimately."""
    return stall_seconds(binary_bytes) + stall_base() * io_bytes / RUN_STALL_IO_BYTES


def execute_bytes() -> int:
    return int(_env_number(EXECUTE_BYTES_ENV, DEFAULT_EXECUTE_BYTES))


def describe_step(stage: str, name: str, graph: str = "") -> str:
    """The words a message uses for one step of one binary."""
    if stage == "info":
        return f"reading the binary info of {name} (systemContextGetBinaryInfo)"
    if stage == "create":
        return f"creating the context of {name} (contextCreateFromBinary)"
    if stage == "execute":
        return f"running graph {graph!r} of {name} once on zeros (graphExecute)"
    if stage == "first-run":
        what = f"graph {graph!r}" if graph else "a graph"
        return f"running {what} of {name} for the first time (graphExecute)"
    return f"starting to vet {name}"


def stall_advice() -> str:
    return (f"A stall is not a verdict on the binary: a slow machine or a large graph takes longer. "
            f"Raise {STALL_ENV} (seconds a step may go without progress, now {stall_base():g}, "
            f"scaled up by the step's size), or skip vetting (vet=False, `--no-vet`) for a file you "
            f"trust.")


# -- verdicts --------------------------------------------------------------------------------------
@dataclass
class VetResult:
    name: str
    sha256: str
    # ok | rejected | crash | hang | unvetted | watched (worker mode) | partial (the child ran out of
    # memory or PD, or met a transient device failure: left to this process, which reports that
    # itself, or recovers, if it happens here too)
    verdict: str
    detail: str = ""
    cached: bool = False
    graphs_executed: int = 0


@dataclass
class VetReport:
    mode: str
    results: list[VetResult] = field(default_factory=list)
    child_seconds: float = 0.0   # wall time of the child process (0 when every verdict was cached)
    children: int = 0

    def to_json(self) -> dict:
        return {"mode": self.mode, "binaries": len(self.results),
                "vetted_in_child": sum(1 for r in self.results if not r.cached
                                       and r.verdict != "watched"),
                "cached": sum(1 for r in self.results if r.cached),
                "watched_in_worker": sum(1 for r in self.results if r.verdict == "watched"),
                "children": self.children, "child_seconds": round(self.child_seconds, 3),
                "graphs_executed": sum(r.graphs_executed for r in self.results)}


def vet_cache_dir() -> Path:
    return default_cache_dir() / "vet"


def _lib_identity(backend_lib: str | None) -> str:
    from qnnrt.core import open_library
    lib = open_library(backend_lib)
    try:
        st = lib.backend_path.stat()
        return f"{lib.backend_path}:{st.st_size}:{int(st.st_mtime)}"
    except OSError:
        return str(lib.backend_path)


def _verdict_path(sha: str, lib_id: str) -> Path:
    import hashlib
    key = hashlib.sha256(f"{VERDICT_VERSION}\0{sha}\0{lib_id}".encode()).hexdigest()
    return vet_cache_dir() / key[:2] / f"{key}.json"


def _cached(sha: str, lib_id: str) -> dict | None:
    p = _verdict_path(sha, lib_id)
    try:
        data = loads_json(p.read_bytes(), str(p))
    except (OSError, QnnrtError):
        return None
    if (isinstance(data, dict) and data.get("sha256") == sha
            and data.get("verdict") in ("ok", "rejected", "crash")):
        return data
    return None


def _store(sha: str, lib_id: str, r: VetResult) -> None:
    p = _verdict_path(sha, lib_id)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(p, json.dumps({"sha256": sha, "verdict": r.verdict, "detail": r.detail[:2000],
                                    "graphs_executed": r.graphs_executed, "library": lib_id,
                                    "time": time.time()}), "vetting verdict", durable=False)
    except (OSError, QnnrtError):
        pass  # a cache that cannot be written only costs a re-vet next time


# -- the child -------------------------------------------------------------------------------------
def vet_binaries(binaries: dict[str, ContextBinary], *, mode: VetMode = "auto",
                 backend_lib: str | None = None, soc: str | int | None = None,
                 progress: Progress | None = None) -> VetReport:
    """Vet every binary of `binaries` (pool key -> binary) whose verdict is not cached, in one child
    process ("auto", "execute" or "create"); `progress(done, total)` as binaries finish.

    Raises FormatError naming the first binary that crashed, hung or was refused in the child."""
    report = VetReport(mode)
    if not binaries:
        return report
    lib_id = f"{_lib_identity(backend_lib)}:{mode}"
    todo: dict[str, list[VetResult]] = {}   # sha -> results waiting for it (equal bytes, one vet)
    first: dict[str, ContextBinary] = {}
    for b in binaries.values():
        sha = b.sha256()   # from the load cache while the file is unchanged
        hit = _cached(sha, lib_id)
        if hit is not None:
            report.results.append(VetResult(b.where, sha, hit["verdict"], str(hit.get("detail", "")),
                                            cached=True))
            continue
        r = VetResult(b.where, sha, "pending")
        report.results.append(r)
        todo.setdefault(sha, []).append(r)
        first.setdefault(sha, b)
    raise_bad(report.results)
    if not todo:
        return report
    shas = list(todo)
    with tempfile.TemporaryDirectory(prefix="qnnrt-vet-") as tmp:
        items = []
        for k, sha in enumerate(shas):
            b = first[sha]
            path = str(b.path) if b.path is not None else os.path.join(tmp, f"binary_{k}.bin")
            if b.path is None:  # a slice of a .pte or bytes embedded in an .onnx: the child's own copy
                with open(path, "wb") as f:
                    f.write(b.buffer.data)
            items.append(VetItem(b.where, path, b.size))
        job = VetJob(tuple(items), mode, execute_bytes(), backend_lib, soc)
        if progress is not None:
            progress(0, len(items))
        run = _run_child(job, progress)
    report.child_seconds, report.children = run.seconds, 1
    for k, sha in enumerate(shas):
        name = first[sha].where
        verdict, detail, ran, cache = run.verdict_of(k, name)
        detail = detail.replace(items[k].path, name)  # a temp copy's path says nothing
        for r in todo[sha]:
            r.verdict, r.detail, r.graphs_executed = verdict, detail, ran
        if cache:
            _store(sha, lib_id, todo[sha][0])
    raise_bad(report.results)
    return report


def raise_bad(results: list[VetResult]) -> None:
    for r in results:
        if r.verdict == "crash":
            raise FormatError(
                f"{r.name}: the QNN library crashed {r.detail}, in a vetting child process; "
                f"qnnrt did not hand this binary to QNN in this process. The binary is corrupt or "
                f"not built for this QNN version: rebuild it. (sha256 {r.sha256[:16]}...; the "
                f"verdict is cached under {vet_cache_dir()})")
        if r.verdict == "hang":
            raise FormatError(f"{r.name}: {r.detail}; the vetting child process was stopped and "
                              f"nothing was handed to QNN in this process. {stall_advice()}")
        if r.verdict == "rejected":  # found bad there: reading it here could crash (it did, fuzzing)
            raise FormatError(f"{r.name}: refused by the vetting child process: {r.detail}")
        if r.verdict == "unvetted":
            raise FormatError(f"{r.name}: could not be vetted ({r.detail}). Pass vet=False "
                              f"(--no-vet) to skip vetting.")


# the child imports qnnrt.core (and the shared modules) only, not the package's __init__ (the loader,
# ONNX, the runtime): a bare package module stands in for `qnnrt`, which halves its start-up
_CHILD_BOOT = ("import sys, types, os; m = types.ModuleType('qnnrt'); "
               "m.__path__ = [os.path.join(sys.argv[1], 'qnnrt')]; sys.modules['qnnrt'] = m; "
               "from qnnrt.runtime.vet.child import main; sys.exit(main(sys.argv[2:]))")


@dataclass
class _ChildRun:
    """What one child did: the answers per item, the step it was in when it ended, how it ended."""
    finished: dict[int, tuple[str, str, int]] = field(default_factory=dict)
    step: tuple[int, str, str] | None = None    # (item, stage, graph) in progress at the end
    ended: str = "ok"            # ok | a signal name | "exit status N" | "hang"
    stalled_s: float = 0.0
    stderr: str = ""
    seconds: float = 0.0

    def verdict_of(self, k: int, name: str) -> tuple[str, str, int, bool]:
        """(verdict, detail, graphs executed, cache it) for item k."""
        if k in self.finished:
            v, detail, ran = self.finished[k]
            return v, detail, ran, v != "partial"   # a lack of memory or a transient failure: no verdict
        where = (describe_step(self.step[1], name, self.step[2])
                 if self.step is not None and self.step[0] == k else None)
        if where is not None and self.ended == "hang":
            return "hang", f"QNN made no progress for {self.stalled_s:.0f} s while {where}", 0, False
        if where is not None and self.ended.startswith("SIG"):
            return "crash", f"({self.ended}) while {where}{self.stderr}", 0, True
        return "unvetted", f"the vetting child ended ({self.ended}) before it{self.stderr}", 0, False


def _run_child(job: VetJob, progress: Progress | None) -> _ChildRun:
    """Run the child on `job`, reading its reports: a step silent for its stall timeout (or a
    child silent that long between steps) is a hang, and the child is killed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = _ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    run = _ChildRun()
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as err:
        proc, end = child.spawn([sys.executable, "-c", _CHILD_BOOT, _ROOT], env, stdout=err,
                                stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            end.send(child.body_frame(child.CONTROL, JOB_ID, WIRE.dumps(job)))
            _follow(end, proc, run, len(job.items), progress)
        except OSError:
            pass   # the child is gone: its exit status says how
        finally:
            end.close()
        rc = child.stop(proc, 0 if run.ended == "hang" else child.STOP_GRACE_S)
        run.seconds = time.monotonic() - t0
        if run.ended != "hang":
            run.ended = "ok" if rc == 0 else signal_name(-rc) if rc < 0 else f"exit status {rc}"
        if rc != 0:
            err.seek(0)
            tail = err.read()[-4000:].decode("utf-8", "replace").strip().splitlines()[-3:]
            run.stderr = ("; child stderr: " + " | ".join(tail)) if tail else ""
    return run


def _follow(end: child.PipeEnd | child.ConnEnd, proc: subprocess.Popen, run: _ChildRun, n_items: int,
            progress: Progress | None) -> None:
    """Read the child's reports until its reply or its end, minding each step's stall timeout."""
    # start-up (an interpreter, numpy, the QNN libraries) is no binary's doing: at least a minute
    since, allowed = time.monotonic(), max(stall_base(), STARTUP_S)
    while True:
        if not end.ready(max(0.0, since + allowed - time.monotonic())):
            run.ended, run.stalled_s = "hang", time.monotonic() - since
            proc.kill()
            return
        frame = end.recv()
        if not frame:
            return
        kind, _ = child.frame_head(frame)
        msg: object = WIRE.loads(child.frame_body(frame), (StepStarted, ItemDone, JobDone))
        if kind == child.REPLY:
            return
        if isinstance(msg, StepStarted):
            run.step = (msg.item, msg.stage, msg.graph)
            since = time.monotonic()
            allowed = (run_stall_seconds(0, msg.nbytes) if msg.stage == "execute"
                       else stall_seconds(msg.nbytes))
        elif isinstance(msg, ItemDone):
            run.finished[msg.item] = (msg.verdict, msg.detail, msg.graphs_run)
            run.step, since, allowed = None, time.monotonic(), stall_base()
            if progress is not None:
                progress(len(run.finished), n_items)


