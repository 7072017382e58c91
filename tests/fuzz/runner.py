"""Run fuzz cases through the Python API (qnnrt.load + one run) in child processes and classify them.

Many cases run in one child (interpreter start-up is paid once); the child prints ``start <i>`` and
``done <i> <class> <detail>`` per case, flushed. A child killed by a signal marks the case it started
last as a native crash, a case without an answer within `case_timeout` as a hang; either way a fresh
child continues with the next case.

Classes: ok (loaded and ran), clean (a QnnrtError), other (any other exception: a bug), crash, hang.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.corpus import Case

ROOT = Path(__file__).resolve().parents[2]
MAX_RUN_ELEMENTS = 1 << 22   # inputs larger than this are not run (only loaded)


@dataclass
class Outcome:
    case: Case
    kind: str
    detail: str = ""


@dataclass
class Summary:
    outcomes: list[Outcome] = field(default_factory=list)
    children: int = 0
    seconds: float = 0.0

    def table(self) -> dict[str, Counter]:
        out: dict[str, Counter] = {}
        for o in self.outcomes:
            out.setdefault(o.case.reader, Counter())[o.kind] += 1
        return out

    def bad(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.kind in ("other", "crash", "hang")]


def _child_main() -> int:
    """Read case paths (JSON lines) on stdin; answer on stdout."""
    import numpy as np

    import qnnrt
    from qnnrt.errors import QnnrtError
    out = sys.stdout
    for line in sys.stdin:
        job = json.loads(line)
        i, path = job["i"], job["path"]
        out.write(f"start {i}\n")
        out.flush()
        kind, detail = "ok", ""
        try:
            prog = qnnrt.load(path)
            try:
                m = prog.method()
                # a free dimension (None: the model names it, e.g. "batch") runs with 1
                shapes = {s.name: tuple(d if isinstance(d, int) else 1 for d in s.shape) for s in m.inputs}
                if all(int(np.prod(sh)) <= MAX_RUN_ELEMENTS for sh in shapes.values()):
                    prog.run(m.name, {s.name: np.zeros(shapes[s.name], s.dtype) for s in m.inputs})
                else:
                    detail = "inputs too large to run"
            finally:
                prog.close()
        except QnnrtError as e:
            kind, detail = "clean", f"{type(e).__name__}: {e}"
        except BaseException as e:  # noqa: BLE001 - the point is to see everything
            import traceback
            tb = traceback.extract_tb(e.__traceback__)
            where = f"{tb[-1].filename}:{tb[-1].lineno}" if tb else "?"
            kind, detail = "other", f"{type(e).__name__}: {e} at {where}"
        detail = " ".join(detail.split())[:600]
        out.write(f"done {i} {kind} {detail}\n")
        out.flush()
    return 0


def run_cases(cases: list[Case], case_timeout: float = 60.0, env: dict | None = None,
              log=None) -> Summary:
    """Run `cases` in as few children as crashes allow; returns every outcome."""
    t0 = time.perf_counter()
    summary = Summary()
    child_env = dict(os.environ, **(env or {}))
    child_env["PYTHONPATH"] = str(ROOT) + os.pathsep + child_env.get("PYTHONPATH", "")
    child_env.setdefault("QNNRT_VET_STALL_TIMEOUT", str(max(5.0, case_timeout / 4)))
    pending = list(enumerate(cases))
    results: dict[int, Outcome] = {}
    while pending:
        # the cases go in a file, not a pipe: a child that dies mid-batch never blocks or breaks
        # the parent's writes (thousands of cases do not fit a pipe buffer)
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as jobs:
            for i, c in pending:
                jobs.write(json.dumps({"i": i, "path": c.path}) + "\n")
        with open(jobs.name, "rb") as job_file:
            proc = subprocess.Popen([sys.executable, "-c", "from tests.fuzz.runner import _child_main;"
                                     "import sys; sys.exit(_child_main())"],
                                    stdin=job_file, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    env=child_env, cwd=str(ROOT), start_new_session=True)
        os.unlink(jobs.name)
        summary.children += 1
        assert proc.stdout
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        started: int | None = None
        deadline = time.monotonic() + case_timeout + 30  # start-up of the child
        buf = b""
        eof = False
        while not eof:
            left = deadline - time.monotonic()
            if left <= 0:  # hang
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                if started is not None:
                    results[started] = Outcome(cases[started], "hang", f"no answer in {case_timeout} s")
                break
            for _key, _ in sel.select(timeout=min(left, 1.0)):
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    eof = True
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    parts = line.decode("utf-8", "replace").split(" ", 3)
                    if parts[0] == "start":
                        started = int(parts[1])
                        deadline = time.monotonic() + case_timeout
                    elif parts[0] == "done":
                        k = int(parts[1])
                        results[k] = Outcome(cases[k], parts[2], parts[3] if len(parts) > 3 else "")
                        started = None
                        if log:
                            log(results[k])
        sel.close()
        rc = proc.wait()
        if started is not None and started not in results:
            name = signal.Signals(-rc).name if rc < 0 else f"exit {rc}"
            results[started] = Outcome(cases[started], "crash", f"child died: {name}")
            if log:
                log(results[started])
        pending = [(i, c) for i, c in pending if i not in results]
        if pending and started is None and rc == 0:  # the child ended without taking them: bug
            for i, c in pending:
                results[i] = Outcome(c, "crash", "child ended early")
            pending = []
    summary.outcomes = [results[i] for i in sorted(results)]
    summary.seconds = time.perf_counter() - t0
    return summary
