"""Thread-safety contract (docs/RELIABILITY.md, "Concurrency"): a Program may be shared by threads;
runs of one Program are serialized by its lock (same or different methods), so outputs equal serial
runs; close() from another thread waits for the run in flight, later runs raise QnnrtError."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import qnnrt
from qnnrt.errors import QnnrtError

THREADS = 6
RUNS = 20


def _inputs(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 64)).astype(np.float32)


def test_threads_same_and_different_methods_match_serial(two_method_program):
    with qnnrt.load(two_method_program) as prog:
        jobs = [(("first", "second")[k % 2], k % 5) for k in range(THREADS * RUNS)]
        serial = {(m, s): prog.run(m, {"x": _inputs(s)})["y"] for m, s in set(jobs)}
        with ThreadPoolExecutor(THREADS) as ex:
            got = list(ex.map(lambda j: (j, prog.run(j[0], {"x": _inputs(j[1])})["y"]), jobs))
    for j, y in got:
        assert np.array_equal(y, serial[j]), j


def test_close_from_another_thread_while_runs_are_in_flight(two_method_program):
    prog = qnnrt.load(two_method_program)
    ref = prog.run("first", {"x": _inputs(0)})["y"]
    started = threading.Barrier(THREADS + 1)
    results: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        started.wait()
        for _ in range(200):
            try:
                y = prog.run("first", {"x": _inputs(0)})["y"]
                ok = "ok" if np.array_equal(y, ref) else "mismatch"
            except QnnrtError as e:
                ok = "closed" if "closed" in str(e) else f"error: {e}"
            with lock:
                results.append(ok)
            if ok != "ok":
                return

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for t in threads:
        t.start()
    started.wait()
    prog.close()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert set(results) <= {"ok", "closed"}, set(results)
    with pytest.raises(QnnrtError, match="closed"):
        prog.run("first", {"x": _inputs(0)})
    prog.close()  # idempotent
