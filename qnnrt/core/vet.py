"""Vetting context binaries qnnrt did not write, in a short-lived child process.

QNN parses context binaries in native code without a checksum; a corrupt one can segfault inside
`systemContextGetBinaryInfo`, `contextCreateFromBinary` or `graphExecute`. Before the real process hands
such a binary to QNN, `vet_binaries` runs the same calls (binary info, create the context, execute each
graph once on zeros, free) in a spawned child (a fresh interpreter, never a fork), all binaries of
one program in one child. The verdict is cached by content hash (and QNN library) under the
user cache folder, so a program is vetted once per change.
A child killed by a signal (or hanging) is a FormatError naming the binary; a clean QNN rejection is
left to the real process, which reports the same error itself.

Protocol: the parent writes a JSON job file; the child prints ``start <i>`` before and
``done <i> ok`` / ``done <i> rejected <message>`` after each binary, flushed, so the binary a crash
happened in is the last one started and not done.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qnnrt.errors import FormatError, QnnrtError
from qnnrt.fileio import buffer_sha256, default_cache_dir, loads_json, write_atomic

if TYPE_CHECKING:
    from qnnrt.core.binary import ContextBinary

VERDICT_VERSION = 1
_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding this qnnrt package


@dataclass
class VetResult:
    name: str
    sha256: str
    verdict: str          # ok | rejected | crash | hang
    detail: str = ""
    cached: bool = False


@dataclass
class VetReport:
    results: list[VetResult]
    child_seconds: float = 0.0   # wall time of the child process (0 when every verdict was cached)
    children: int = 0


def vet_cache_dir() -> Path:
    return default_cache_dir() / "vet"


def _lib_identity(backend_lib: str | None) -> str:
    from qnnrt._capi.library import open_library
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
    if isinstance(data, dict) and data.get("sha256") == sha and data.get("verdict") in ("ok", "rejected",
                                                                                          "crash"):
        return data
    return None


def _store(sha: str, lib_id: str, verdict: str, detail: str) -> None:
    p = _verdict_path(sha, lib_id)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(p, json.dumps({"sha256": sha, "verdict": verdict, "detail": detail[:2000],
                                    "library": lib_id, "time": time.time()}), "vetting verdict")
    except (OSError, QnnrtError):
        pass  # a cache that cannot be written only costs a re-vet next time


def _timeout_for(total_bytes: int, n: int) -> float:
    env = os.environ.get("QNNRT_VET_TIMEOUT")
    if env:
        return float(env)
    return 60.0 + 5.0 * n + total_bytes / (20 << 20)


def vet_binaries(binaries: dict[str, ContextBinary], *, backend_lib: str | None = None,
                 soc: str | int | None = None, execute: bool = True) -> VetReport:
    """Vet every binary in `binaries` (pool key -> binary) whose verdict is not cached, in one child:
    binary info, create the context, run each graph once on zeros (unless `execute` is False), free.

    Raises FormatError naming the first binary that crashed or hung the child."""
    if not binaries:
        return VetReport([])
    lib_id = _lib_identity(backend_lib) + ("" if execute else ":create-only")
    results: list[VetResult] = []
    todo: list[tuple[int, ContextBinary, str]] = []
    for b in binaries.values():
        sha = buffer_sha256(b.buffer)
        hit = _cached(sha, lib_id)
        if hit is not None:
            results.append(VetResult(b.where, sha, hit["verdict"], str(hit.get("detail", "")), True))
        else:
            results.append(VetResult(b.where, sha, "pending"))
            todo.append((len(results) - 1, b, sha))
    report = VetReport(results)
    _raise_bad(results)
    if not todo:
        return report
    with tempfile.TemporaryDirectory(prefix="qnnrt-vet-") as tmp:
        items = []
        for k, (_, b, _sha) in enumerate(todo):
            if b.path is not None:
                path = str(b.path)
            else:  # a slice of a .pte or bytes embedded in an .onnx: give the child its own copy
                path = os.path.join(tmp, f"binary_{k}.bin")
                with open(path, "wb") as f:
                    f.write(b.buffer.data)
            items.append({"name": b.where, "path": path, "size": b.size})
        job = os.path.join(tmp, "job.json")
        with open(job, "w", encoding="utf-8") as f:
            json.dump({"backend_lib": backend_lib, "soc": soc, "items": items, "execute": execute}, f)
        started, finished, rc, err, seconds = _run_child(job, _timeout_for(
            sum(b.size for _, b, _ in todo), len(todo)))
        report.child_seconds, report.children = seconds, 1
    for k, (i, b, sha) in enumerate(todo):
        r = results[i]
        if k in finished:
            r.verdict, r.detail = finished[k]
            _store(sha, lib_id, r.verdict, r.detail)
        elif k in started and rc == "hang":
            r.verdict, r.detail = "hang", f"no answer within the vetting timeout{err}"
        elif k in started:
            r.verdict, r.detail = "crash", f"{rc}{err}"
            _store(sha, lib_id, "crash", r.detail)
        else:
            r.verdict, r.detail = "unvetted", f"the vetting child stopped before it ({rc}){err}"
    _raise_bad(results)
    return report


def _raise_bad(results: list[VetResult]) -> None:
    for r in results:
        if r.verdict == "crash":
            raise FormatError(
                f"{r.name}: the QNN library crashed ({r.detail}) on this context binary (binary "
                f"info, context creation or one run of a graph) in a vetting child process; qnnrt "
                f"did not hand it to QNN in this process. The file is corrupt or not a context "
                f"binary for this QNN version: rebuild it. (sha256 {r.sha256[:16]}...; "
                f"the verdict is cached under {vet_cache_dir()})")
        if r.verdict == "hang":
            raise FormatError(
                f"{r.name}: QNN did not finish reading this context binary in a vetting child process "
                f"({r.detail}); it was not handed to QNN in this process. Rebuild the binary, or set "
                f"QNNRT_VET_TIMEOUT (seconds) if the machine is just slow, or pass vet=False.")
        if r.verdict == "rejected":  # found bad there: reading it here could crash (it did, fuzzing)
            raise FormatError(f"{r.name}: refused by the vetting child process: {r.detail}")
        if r.verdict == "unvetted":
            raise FormatError(f"{r.name}: could not be vetted ({r.detail}). Pass vet=False "
                              f"(--no-vet) to skip vetting.")


# the child imports qnnrt.core only, not the package's __init__ (the loader, onnx, the runtime):
# a bare package module stands in for `qnnrt`, which halves the child's start-up
_CHILD_BOOT = ("import sys, types, os; m = types.ModuleType('qnnrt'); "
               "m.__path__ = [os.path.join(sys.argv[1], 'qnnrt')]; sys.modules['qnnrt'] = m; "
               "from qnnrt.core.vet import _child; sys.exit(_child(sys.argv[2]))")


def _run_child(job: str, timeout: float):
    """(started indices, {index: (verdict, detail)}, exit status or 'hang', stderr note, seconds)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = _ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _CHILD_BOOT, _ROOT, job], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    try:
        out, errb = proc.communicate(timeout=timeout)
        rc: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, errb = proc.communicate()
        rc = "hang"
    seconds = time.perf_counter() - t0
    started: set[int] = set()
    finished: dict[int, tuple[str, str]] = {}
    for line in out.decode("utf-8", "replace").splitlines():
        parts = line.split(" ", 3)
        if len(parts) >= 2 and parts[0] == "start" and parts[1].isdigit():
            started.add(int(parts[1]))
        elif len(parts) >= 3 and parts[0] == "done" and parts[1].isdigit():
            finished[int(parts[1])] = (parts[2], parts[3] if len(parts) > 3 else "")
    if isinstance(rc, int) and rc < 0:
        import signal
        signum = -rc
        try:
            rc = signal.Signals(signum).name
        except ValueError:
            rc = f"signal {signum}"
    elif isinstance(rc, int) and rc != 0:
        rc = f"exit status {rc}"
    tail = errb.decode("utf-8", "replace").strip().splitlines()[-3:]
    err = ("; child stderr: " + " | ".join(tail)) if tail and rc != 0 else ""
    return started, finished, rc, err, seconds


def _child(job_path: str) -> int:
    """The vetting child: binary info, then create and free a context, for each item."""
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    from qnnrt.core.backend import Backend
    from qnnrt.core.binary import ContextBinary
    from qnnrt.core.context import Context
    import numpy as np
    backend = None
    out = sys.stdout
    try:
        for i, item in enumerate(job["items"]):
            out.write(f"start {i}\n")
            out.flush()
            try:
                b = ContextBinary(item["path"], name=item["name"], backend_lib=job["backend_lib"])
                try:
                    info = b.info
                    if backend is None:
                        backend = Backend(backend_lib=job["backend_lib"],
                                          soc=job["soc"] or info.soc_model or None, log_level="error")
                    ctx = Context(backend, b)
                    try:
                        if job.get("execute", True):
                            for g in info.graphs:  # a corrupt binary can also crash in execute
                                graph = ctx.graph(g.name)
                                graph.execute([np.zeros(t.shape, t.dtype) for t in g.inputs],
                                              dequantize=False)
                    finally:
                        ctx.close()
                finally:
                    b.close()
                out.write(f"done {i} ok\n")
            except QnnrtError as e:
                msg = " ".join(str(e).split())[:500]
                out.write(f"done {i} rejected {msg}\n")
            out.flush()
    finally:
        if backend is not None:
            backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
