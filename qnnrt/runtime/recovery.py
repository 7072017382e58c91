"""Recovery from graph-call failures a device raises transiently: re-create, call again, bounded.

On devices a graph execution can fail although nothing is wrong with the program: `1100` (general;
"Dma execution failed on the skel side", ExecuTorch #15985, ORT #21832, ai-hub-apps #128) after many
load/run/free cycles, `1007` when the DSP restarted (subsystem restart, SSR) and QNN recovered the
session but every handle made before is stale, `1011` when QNN could not recover it. What cures them
is what ONNX Runtime's QNN EP does on an SSR (free the stale context, create it again from its binary,
retrieve the graph, execute again) and what the seed-002 reporter found by hand (the same contexts
run fine when loaded again). So a failed call with one of these codes:

- 1100: its context is freed and created again;
- 1007: every live context is (the SSR made all their handles stale);
- 1011: every live context, and the backend and device under them;

then the same call runs again on the new handles with the same inputs (QNN only reads them; outputs
come from the successful attempt alone, the caller's re-run binds them afresh). A call that fails
again right after its re-creation escalates one step (context -> all contexts -> backend) and gives up
after the backend step; all recoveries of a program share one budget (`max_recoveries`, per run of
the CLI). Each recovery is a warning on the `qnnrt.runtime` logger and a `RecoveryRecord`. Every
other error (invalid tensor, argument or binary: a bug or bad input) is raised unchanged, never
retried. A failure that is not cured is a RecoveryError naming the graph, the code, the recoveries
tried and what to do.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

from qnnrt.core import qnn_codes
from qnnrt.errors import QnnError, QnnrtError, RecoveryError
from qnnrt.runtime.hooks import Tracing

log = logging.getLogger("qnnrt.runtime")
T = TypeVar("T")

DEFAULT_MAX_RECOVERIES = 3
# what each transient code re-creates first; a repeat failure of the same call takes the next step
STEPS = ("context", "contexts", "backend")
FIRST_STEP = {qnn_codes.GENERAL: "context", qnn_codes.SYSTEM_COMMUNICATION: "contexts",
              qnn_codes.SYSTEM_COMMUNICATION_FATAL: "backend"}
_CAUSES = {
    qnn_codes.GENERAL: "on devices 1100 follows a DMA failure on the DSP side; known causes are a "
    "stale session after many load / run / free cycles and an old QNN version: try a newer QNN SDK "
    "(onnxruntime-qnn / QAIRT), and reboot the device if it persists",
    qnn_codes.SYSTEM_COMMUNICATION: "the DSP restarted (subsystem restart) again after the contexts "
    "were re-created: check the device's DSP logs (logcat / dmesg) for the crash cause",
    qnn_codes.SYSTEM_COMMUNICATION_FATAL: "the DSP restarted and the session could not be restored "
    "even with a new backend and device: restart the process; reboot the device if it persists",
}


def is_transient(error: QnnError) -> bool:
    """A graph-call error that re-creating the contexts (or backend) can cure."""
    return error.code in FIRST_STEP


@dataclass
class RecoveryRecord:
    """One recovery: which graph call failed, how, what was re-created and what it cost."""
    graph: str
    context: str
    iteration: int          # the program's run index, from 0 (every Program.run counts, warm-up too)
    code: int
    code_name: str
    recreated: str          # "context", "contexts" or "backend"
    contexts: list[str]     # the contexts created again
    seconds: float          # re-creation + the call's re-run
    succeeded: bool

    def to_dict(self) -> dict:
        d = asdict(self)
        d["seconds"] = round(self.seconds, 6)
        return d


class RecoverablePool(Protocol):
    """What recovery asks of a pool: a ContextPool, or the multi-PD pool (runtime/hosts/pd/fleet.py),
    which re-creates in the PD that holds the context, and for a DSP restart in every PD on that
    HTP device."""

    def stale_with(self, key: str) -> list[str]: ...

    def live_context(self, key: str) -> Any: ...

    def recreate(self, keys: list[str], restart_backend: bool = False) -> list[str]: ...


class Recovery:
    """The recovery policy of one program: `rerun` a failed graph call, count and record."""

    def __init__(self, pool: RecoverablePool | None, max_recoveries: int = DEFAULT_MAX_RECOVERIES,
                 iteration: Callable[[], int] = lambda: 0,
                 after_restart: Callable[[], None] | None = None, tracer: Tracing | None = None):
        if max_recoveries < 0:
            raise QnnrtError(f"max_recoveries {max_recoveries}: give 0 (no recovery) or more")
        self.pool = pool
        self.max_recoveries = max_recoveries
        self._iteration = iteration
        self._after_restart = after_restart   # makes again what a backend restart closed
        self.tracer = tracer                  # each recovery a slice of the run's trace
        self.records: list[RecoveryRecord] = []

    @property
    def used(self) -> int:
        return len(self.records)

    def rerun(self, key: str, graph: str, error: QnnError, call: Callable[[Any], T]) -> T:
        """`error` came from the graph call `graph` of context `key`: re-create what it calls for
        and `call(new live context)` again, escalating on a repeat failure; re-raise a
        non-transient error unchanged, and raise RecoveryError when the budget or the steps run
        out. `call` must bind the call's outputs afresh (its inputs are the same arrays). Without
        a pool to re-create contexts in, every error is raised unchanged."""
        pool = self.pool
        if not is_transient(error) or pool is None:
            raise error
        step = STEPS.index(FIRST_STEP[error.code])
        tried = 0
        while True:
            if step >= len(STEPS) or self.used >= self.max_recoveries:
                raise self._give_up(key, graph, error, tried, budget=step < len(STEPS))
            tried += 1
            what = STEPS[step]
            t0 = time.perf_counter()
            rec = RecoveryRecord(graph, key, self._iteration(), error.code, error.code_name, what,
                                 [], 0.0, False)
            self.records.append(rec)
            log.warning("graph %r (context %r) failed with QNN error %d (%s) in iteration %d; "
                        "re-creating %s and running it again (recovery %d of at most %d)",
                        graph, key, error.code, error.code_name, rec.iteration, _describe(what, key),
                        self.used, self.max_recoveries)
            keys = pool.stale_with(key) if what == "contexts" else [key]
            start = self.tracer.now() if self.tracer is not None else 0
            try:
                rec.contexts = pool.recreate(keys, restart_backend=what == "backend")
                if what == "backend" and self._after_restart is not None:
                    self._after_restart()
                result = call(pool.live_context(key))
            except QnnError as e:
                rec.seconds = time.perf_counter() - t0
                self._traced(rec, start)
                if not is_transient(e):
                    raise
                # the next step, or the one the new code calls for when that goes further
                error, step = e, max(step + 1, STEPS.index(FIRST_STEP[e.code]))
                continue
            rec.seconds = time.perf_counter() - t0
            rec.succeeded = True
            self._traced(rec, start)
            return result

    def _traced(self, rec: RecoveryRecord, start: int) -> None:
        """The recovery as a slice (its re-creations and the call's re-run inside it)."""
        if self.tracer is not None:
            self.tracer.span(f"recovery: re-create {rec.recreated}", "recovery", start,
                             {"graph": rec.graph, "context": rec.context, "code": rec.code,
                              "code_name": rec.code_name, "contexts": len(rec.contexts),
                              "succeeded": rec.succeeded, "iteration": rec.iteration})

    def _give_up(self, key: str, graph: str, error: QnnError, tried: int,
                 budget: bool) -> RecoveryError:
        why = (f"the run's recovery budget is used up ({self.used} of --max-recoveries "
               f"{self.max_recoveries})" if budget
               else "it failed again after the backend, the device and its contexts were re-created")
        remedy = (f"{_CAUSES.get(error.code, '')}. qnnrt recovered {self.succeeded} failure(s) of "
                  f"this run before. If failures are rare but a long run meets several, raise "
                  f"--max-recoveries (Python: LoadOptions(max_recoveries=N)); outputs written so far "
                  f"are complete.")
        return RecoveryError(error, tried, remedy,
                             f"for graph {graph!r} of context {key!r}, not recovered after {tried} "
                             f"recovery attempt(s) for this call: {why}")

    @property
    def succeeded(self) -> int:
        return sum(1 for r in self.records if r.succeeded)

    def summary(self) -> dict:
        """For reports: the budget, how many recoveries were tried and succeeded, and each one."""
        return {"max_recoveries": self.max_recoveries, "tried": self.used,
                "succeeded": self.succeeded, "records": [r.to_dict() for r in self.records]}


def _describe(what: str, key: str) -> str:
    return {"context": f"context {key!r}", "contexts": "every live context",
            "backend": "the backend, the device and every live context"}[what]
