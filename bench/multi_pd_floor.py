"""What any two-process split of a program can cost on this machine, whatever the runtime: the
floors and the controls that multi-PD's ratio to one PD is read against (bench/RESULTS.md).

    python bench/multi_pd_floor.py handoff [--work-us 47] [--busy]
        two processes hand a token back and forth, each working --work-us (a clock spin, no memory)
        per turn, the token through a pipe and a shared word, the waiter polling or blocking;
        against one process doing both turns' work. With --busy a busy loop takes a core.
    python bench/multi_pd_floor.py side-by-side PTE INPUT --backend-lib SHIM [--windows 20]
        the program in one PD alone, then two such runs at once on two cores: per window of 1,000
        iterations, the median (a host that slows a core now and then shows here, without qnnrt's
        two processes talking at all).
    python bench/multi_pd_floor.py cores PTE INPUT --backend-lib SHIM
        multi-pd:2 with its two processes on one core and on two (sched_setaffinity; Linux): what
        sharing a core costs each side's own part (a core left to them by a busy other core).

SHIM: the ExecuTorch kit's libQnnHtp.so (bench/anchor/README.md) with QNN_SHIM_REAL, QNN_SHIM_NO_FIX,
QNN_SHIM_KEEP_PLATFORM, QNN_SHIM_NOOP_EXEC and QNN_SHIM_COUNT set as bench/ab_multi_pd_load.sh sets them.
"""
from __future__ import annotations

import argparse
import mmap
import os
import statistics
import subprocess
import sys
import time
from typing import Callable

CLOCK = time.perf_counter


def _spin(seconds: float) -> None:
    end = CLOCK() + seconds
    while CLOCK() < end:
        pass


def _handoff(work_s: float, poll: bool, turns: int) -> float:
    """Median seconds of one round (this side's turn, then the other's) over `turns` rounds."""
    shared = mmap.mmap(-1, 4096)
    words = memoryview(shared).cast("Q")
    from_parent, to_child = os.pipe()   # (read end, write end)
    from_child, to_parent = os.pipe()

    def wait(word: int, want: int, fd: int) -> None:
        if poll:
            end = CLOCK() + 300e-6
            while words[word] != want and CLOCK() < end:
                pass
        os.read(fd, 1)

    pid = os.fork()
    if pid == 0:
        k = 0
        while True:
            k += 1
            wait(0, k, from_parent)
            if words[2]:
                os._exit(0)
            _spin(work_s)
            words[1] = k
            os.write(to_parent, b"x")
    rounds = []
    for k in range(1, turns + 1):
        t0 = CLOCK()
        _spin(work_s)
        words[0] = k
        os.write(to_child, b"x")
        wait(1, k, from_child)
        rounds.append(CLOCK() - t0)
    words[2] = 1
    words[0] = turns + 1
    os.write(to_child, b"x")
    os.waitpid(pid, 0)
    return statistics.median(rounds)


def handoff(a: argparse.Namespace) -> None:
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if a.busy else None
    try:
        time.sleep(0.3 if hog else 0.0)
        w = a.work_us * 1e-6
        one = statistics.median(_timed(lambda: _spin(2 * w)) for _ in range(a.turns))
        print(f"load {'busy' if a.busy else 'idle'}, {a.work_us:g} us a side: one process "
              f"{one * 1e6:.1f} us per round")
        for poll in (True, False):
            two = _handoff(w, poll, a.turns)
            print(f"  two processes, {'polling' if poll else 'blocking'}: {two * 1e6:.1f} us "
                  f"({two / one:.2f}x)")
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def _timed(f: Callable[[], object]) -> float:
    t0 = CLOCK()
    f()
    return CLOCK() - t0


def _windows(pte: str, inp: str, lib: str, windows: int, cpu: int | None) -> list[float]:
    """Per-window medians (us) of the program in one PD."""
    import numpy as np

    import qnnrt
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    x = np.load(inp)
    with qnnrt.load(pte, residency="eager", backend_lib=lib) as p:
        for _ in range(50):
            p.run(None, [x])
        out = []
        for _ in range(windows):
            ts = []
            for _ in range(1000):
                t0 = CLOCK()
                p.run(None, [x])
                ts.append(CLOCK() - t0)
            out.append(statistics.median(ts) * 1e6)
    return out


def side_by_side(a: argparse.Namespace) -> None:
    me = [sys.executable, __file__, "_windows", a.pte, a.input, "--backend-lib", a.backend_lib,
          "--windows", str(a.windows)]
    alone = subprocess.run(me + ["--cpu", "0"], capture_output=True, text=True, check=True)
    print("alone (cpu 0):    ", alone.stdout.strip().splitlines()[-1])
    runs = [subprocess.Popen(me + ["--cpu", str(c)], stdout=subprocess.PIPE, text=True)
            for c in (0, 1)]
    for c, r in enumerate(runs):
        print(f"together (cpu {c}):", r.communicate()[0].strip().splitlines()[-1])


def cores(a: argparse.Namespace) -> None:
    import numpy as np

    import qnnrt
    x = np.load(a.input)
    for together in (False, True, False, True):
        with qnnrt.load(a.pte, residency="multi-pd:2", backend_lib=a.backend_lib,
                        options=qnnrt.LoadOptions(pd_budget=a.pd_budget)) as p:
            workers = [w["pid"] for w in p.pool.summary()["pd_workers"] if not w["in_process"]]
            os.sched_setaffinity(0, {0})
            for pid in workers:
                os.sched_setaffinity(pid, {0} if together else {1})
            for _ in range(50):
                p.run(None, [x])
            ts = [_timed(lambda: p.run(None, [x])) for _ in range(a.iterations)]
        print(f"multi-pd:2, {'one core' if together else 'two cores'}: "
              f"{statistics.median(ts) * 1e6:.0f} us per iteration (median)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    h = sub.add_parser("handoff")
    h.add_argument("--work-us", type=float, default=47.0)
    h.add_argument("--turns", type=int, default=5000)
    h.add_argument("--busy", action="store_true")
    for name in ("side-by-side", "cores", "_windows"):
        s = sub.add_parser(name)
        s.add_argument("pte")
        s.add_argument("input")
        s.add_argument("--backend-lib", required=True)
        s.add_argument("--windows", type=int, default=20)
        s.add_argument("--cpu", type=int)
        s.add_argument("--iterations", type=int, default=2000)
        s.add_argument("--pd-budget", default="400MB")
    a = ap.parse_args()
    if a.what == "handoff":
        handoff(a)
    elif a.what == "side-by-side":
        side_by_side(a)
    elif a.what == "cores":
        cores(a)
    else:
        medians = _windows(a.pte, a.input, a.backend_lib, a.windows, a.cpu)
        print(" ".join(f"{v:.0f}" for v in medians))


if __name__ == "__main__":
    main()
