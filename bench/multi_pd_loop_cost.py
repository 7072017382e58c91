"""What the worker's plain segment loop costs by itself, per step: the loop of
`WorkerSegment._run_plain` (runtime/hosts/pd/worker_segment.py) over 66 no-op steps (33 graph steps, each
writing the status word, and 33 CPU steps), against the same loop without the status write and a
bare `for ... run(values)`. No QNN is loaded: this is the part of the worker's ~0.9 us per step
that its own bookkeeping can account for.

    python bench/multi_pd_loop_cost.py [--repeats 2000]
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from qnnrt.runtime.hosts.pd import protocol as proto

STEPS = 66
_GRAPH, _UNTIMED = 0, 2


def _noop(values: list) -> float:
    return 0.0


PLAIN = [(k, _noop, _GRAPH if k % 2 == 0 else _UNTIMED) for k in range(STEPS)]


def _loop(status: proto.StatusBlock | None, values: list) -> None:
    """The plain loop's shape: a graph step writes the status word and adds its seconds."""
    accelerator, calls = 0.0, 0
    for k, run, kind in PLAIN:
        if kind == _GRAPH:
            if status is not None:
                status.at_step(k, calls)
            accelerator += run(values)
            calls += 1
        else:
            run(values)


def _bare(values: list) -> None:
    for _k, run, _kind in PLAIN:
        run(values)


def _per_step_us(fn: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2] * 1e6 / STEPS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2000)
    a = ap.parse_args()
    status = proto.StatusBlock(np.zeros(1, proto.STATUS_DTYPE))
    values: list = [None] * 8
    for name, fn in (("plain loop", lambda: _loop(status, values)),
                     ("without the status write", lambda: _loop(None, values)),
                     ("bare for-run", lambda: _bare(values))):
        print(f"{name}: {_per_step_us(fn, a.repeats):.3f} us per step (median of {a.repeats} runs of {STEPS} steps)")


if __name__ == "__main__":
    main()
