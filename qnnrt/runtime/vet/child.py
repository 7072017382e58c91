"""The vetting child: the QNN calls a corrupt context binary can crash or hang, run on each binary
of a job in a fresh interpreter, each step reported before it starts (runtime/vet/protocol.py).

It imports `qnnrt.core` and the shared modules only (the parent boots it with a bare `qnnrt`
package module, so the loader, ONNX and the runtime's policy are never imported: start-up stays
short). Its channel is a pipe pair of its own (runtime/ipc/child.py), not stdout.
"""
from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from qnnrt.errors import QnnError, QnnrtError
from qnnrt.runtime.ipc.child import (PROGRESS, REPLY, ConnEnd, PipeEnd, ProtocolError, body_frame,
                                 child_end, frame_body)
from qnnrt.runtime.recovery import is_transient
from qnnrt.runtime.vet.protocol import (JOB_ID, WIRE, ItemDone, JobDone, StepStarted, VetItem, VetJob,
                                       hook_delay)

if TYPE_CHECKING:
    from qnnrt.core.binary import GraphSpec

# test hook, read here only (never by the parent or the user's process): "stage:seconds" makes the
# child sleep that long at the start of every step of that stage (info, create, execute)
def graph_io_bytes(graph: GraphSpec) -> int:
    return sum(t.nbytes for t in (*graph.inputs, *graph.outputs))


def executes(mode: str, binary_bytes: int, io_bytes: int, limit: int) -> bool:
    """Does vetting run this graph on zeros? 'execute': every graph; 'auto': the cheap ones (binary
    plus the graph's I/O within `limit` bytes); 'create': none."""
    return mode == "execute" or (mode == "auto" and binary_bytes + io_bytes <= limit)


class _Reporter:
    def __init__(self, end: PipeEnd | ConnEnd):
        self.end = end

    def send(self, message: object) -> None:
        self.end.send(body_frame(PROGRESS, JOB_ID, WIRE.dumps(message)))

    def step(self, i: int, stage: str, nbytes: int, graph: str = "") -> None:
        self.send(StepStarted(i, stage, nbytes, graph))
        delay = hook_delay(stage)
        if delay:
            time.sleep(delay)


def _vet_one(rep: _Reporter, i: int, item: VetItem, job: VetJob, state: dict) -> int:
    """Info, create, the graphs the mode runs, free; the number of graphs executed."""
    import numpy as np
    from qnnrt.core.backend import Backend
    from qnnrt.core.binary import ContextBinary
    from qnnrt.core.context import Context
    size = item.size
    b = ContextBinary(item.path, name=item.name, backend_lib=job.backend_lib)
    try:
        rep.step(i, "info", size)
        info = b.info
        if state.get("backend") is None:
            state["backend"] = Backend(backend_lib=job.backend_lib,
                                       soc=job.soc or info.soc_model or None, log_level="error")
        rep.step(i, "create", size)
        ran = 0
        with Context(state["backend"], b) as ctx:
            for g in info.graphs:
                io = graph_io_bytes(g)
                if not executes(job.mode, size, io, job.execute_bytes):
                    continue
                rep.step(i, "execute", size + io, g.name)
                ctx.graph(g.name).execute([np.zeros(t.shape, t.dtype) for t in g.inputs],
                                                   dequantize=False)
                ran += 1
        return ran
    finally:
        b.close()


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())[:500]


def main(argv: list[str]) -> int:
    """Read the job from the channel `argv` names, vet each item, reply once."""
    end = child_end(argv)
    frame = end.recv()
    try:
        job = WIRE.loads(frame_body(frame), VetJob) if frame else None
    except ProtocolError:
        job = None
    if job is None:
        return 2
    rep = _Reporter(end)
    state: dict = {}
    try:
        for i, item in enumerate(job.items):
            try:
                ran = _vet_one(rep, i, item, job, state)
                rep.send(ItemDone(i, "ok", "", ran))
            except QnnError as e:
                # out of memory / PD in this child, or a transient device failure (what recovery
                # re-creates for: 1100 / 1007 / 1011), says nothing about the binary: not a verdict
                inconclusive = e.is_out_of_memory or (e.function == "graphExecute" and is_transient(e))
                rep.send(ItemDone(i, "partial" if inconclusive else "rejected", _one_line(e)))
            except QnnrtError as e:
                rep.send(ItemDone(i, "rejected", _one_line(e)))
        end.send(body_frame(REPLY, JOB_ID, WIRE.dumps(JobDone(len(job.items)))))
    finally:
        if state.get("backend") is not None:
            state["backend"].close()
        end.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
