"""Round-trip cost of request/reply channel candidates between two processes.

Each candidate sends a tiny request to a spawned child and waits for its reply, N times; the child
answers, after `--work-us` of busy work (a plan segment's run; the parent then works as long before
its next request, as the main process runs its own part of an iteration: a side that blocked is
woken from sleep then, not while it is about to poll). Reported: median / p90 / p99 microseconds
per round trip beyond the two sides' work. Run it niced and note the load average: on a 2-core
machine a spinning side competes with everything else.

    nice -n 10 python bench/bench_channel.py --calls 20000 [--work-us 60]

The last candidates are qnnrt's own channel (runtime/ipc/child.py: pipes, the doorbell page, SpinWait
polling it with and without sched_yield) and a futex on a shared word (Linux, through ctypes).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import sys
import time
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from typing import Callable

_SPIN_S = 50e-6
_WORK = {"s": 0.0}   # each side's busy work per message (--work-us), set in the children too


def _work(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


# -- child loops (module level: spawn pickles them by name) --------------------------------------

def _recv_fds(c: Connection, n: int) -> list[int]:
    from multiprocessing.reduction import recv_handle
    return [recv_handle(c) for _ in range(n)]


def _child_fd(work_s: float, c: Connection) -> None:
    rfd, wfd = _recv_fds(c, 2)
    while True:
        b = os.read(rfd, 8)
        if not b or b == b"quit\0\0\0\0":
            return
        _work(work_s)
        os.write(wfd, b)


def _child_sock(s: socket.socket) -> None:
    while True:
        b = s.recv(8)
        if not b or b == b"quit\0\0\0\0":
            return
        s.send(b)


def _child_conn(c: Connection) -> None:
    while True:
        b = c.recv_bytes()
        if b == b"quit":
            return
        c.send_bytes(b)


def _spin_wait(buf: memoryview, idx: int, want: int, spin_s: float) -> bool:
    """Spin up to spin_s for buf[idx] == want; True when seen."""
    end = time.perf_counter() + spin_s
    while buf[idx] != want:
        if time.perf_counter() > end:
            return False
    return True


def _child_shm(name: str, spin_s: float, mode: str, c: Connection) -> None:
    """Shared-memory flag: byte 0 = request sequence (mod 256), byte 1 = reply sequence.

    The sender stores the flag, then rings a doorbell (eventfd or pipe write); the receiver spins
    on the flag a short while, else blocks on the doorbell and re-checks the flag (a stale ring,
    left by a message already seen while spinning, only costs one more loop)."""
    doorbell_r, reply_w = _recv_fds(c, 2)
    shm = shared_memory.SharedMemory(name=name)
    buf = shm.buf
    seq = 0
    try:
        while True:
            seq = (seq + 1) & 0xFF
            while not _spin_wait(buf, 0, seq, spin_s):
                os.read(doorbell_r, 8)
            if buf[2] == 1:
                return
            buf[1] = seq
            if mode != "spin":
                os.write(reply_w, b"\x01\0\0\0\0\0\0\0")
    finally:
        del buf
        shm.close()


# -- candidates ----------------------------------------------------------------------------------

def _run(ctx, target, args, calls: int, once: Callable[[], None], stop: Callable[[], None],
         fds: tuple[int, ...] = ()) -> list[float]:
    from multiprocessing.reduction import send_handle
    ctl, child_ctl = ctx.Pipe()
    p = ctx.Process(target=target, args=(*args, child_ctl) if fds else args, daemon=True)
    p.start()
    for fd in fds:
        send_handle(ctl, fd, p.pid)
    work_s = _WORK["s"]
    for _ in range(200):
        once()
    ts = []
    for _ in range(calls):
        _work(work_s)   # this side's own part, then the request
        t0 = time.perf_counter()
        once()
        ts.append((time.perf_counter() - t0 - work_s) * 1e6)
    stop()
    p.join(5)
    return ts


def bench_pipe(ctx, calls: int) -> list[float]:
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    msg = b"\x01" * 8

    def once() -> None:
        os.write(a_w, msg)
        os.read(b_r, 8)
    return _run(ctx, _child_fd, (_WORK["s"],), calls, once, lambda: os.write(a_w, b"quit\0\0\0\0"),
                (a_r, b_w))


def bench_socketpair(ctx, calls: int) -> list[float]:
    s, c = socket.socketpair()
    msg = b"\x01" * 8

    def once() -> None:
        s.send(msg)
        s.recv(8)
    return _run(ctx, _child_sock, (c,), calls, once, lambda: s.send(b"quit\0\0\0\0"))


def bench_connection(ctx, calls: int) -> list[float]:
    a, b = ctx.Pipe()
    msg = b"\x01" * 8

    def once() -> None:
        a.send_bytes(msg)
        a.recv_bytes()
    return _run(ctx, _child_conn, (b,), calls, once, lambda: a.send_bytes(b"quit"))


def bench_shm(ctx, calls: int, mode: str, spin_s: float) -> list[float]:
    """mode: eventfd (doorbell = Linux eventfd), pipe (doorbell = pipe), spin (no doorbell)."""
    shm = shared_memory.SharedMemory(create=True, size=64)
    buf = shm.buf
    buf[0] = buf[1] = buf[2] = 0
    if mode == "eventfd":
        req_r = req_w = os.eventfd(0)
        rep_r = rep_w = os.eventfd(0)
    else:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
    state = {"seq": 0}
    ring = b"\x01\0\0\0\0\0\0\0"
    wait_s = spin_s if mode != "spin" else 3600.0

    def once() -> None:
        seq = state["seq"] = (state["seq"] + 1) & 0xFF
        buf[0] = seq
        if mode != "spin":
            os.write(req_w, ring)
        while not _spin_wait(buf, 1, seq, wait_s):
            os.read(rep_r, 8)

    def stop() -> None:
        buf[2] = 1
        buf[0] = (state["seq"] + 1) & 0xFF
        if mode != "spin":
            os.write(req_w, ring)
    try:
        return _run(ctx, _child_shm, (shm.name, wait_s, mode), calls, once, stop, (req_r, rep_w))
    finally:
        buf.release()
        shm.close()
        shm.unlink()


_FUTEX_NR = {"x86_64": 202, "aarch64": 98}
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1


def _futex():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    nr = _FUTEX_NR[os.uname().machine]

    def call(addr: int, op: int, val: int) -> int:
        return libc.syscall(nr, ctypes.c_void_p(addr), op, val, None, None, 0)
    return call


def _child_futex(name: str, c: Connection) -> None:
    """Word 0: the request count, word 1: the reply count (u32 each); FUTEX_WAIT while unchanged."""
    import ctypes
    futex = _futex()
    shm = shared_memory.SharedMemory(name=name)
    words = (ctypes.c_uint32 * 16).from_buffer(shm.buf)
    base = ctypes.addressof(words)
    seen = 0
    try:
        while True:
            while words[0] == seen:
                futex(base, _FUTEX_WAIT, seen)
            seen = words[0]
            if words[2]:
                return
            _work(_WORK_CHILD["s"])
            words[1] = seen
            futex(base + 4, _FUTEX_WAKE, 1)
    finally:
        del words
        shm.close()


_WORK_CHILD = {"s": 0.0}


def _child_futex_boot(name: str, work_s: float, c: Connection) -> None:
    _WORK_CHILD["s"] = work_s
    _child_futex(name, c)


def bench_futex(ctx, calls: int) -> list[float]:
    """A shared u32 per direction, waited for with FUTEX_WAIT and rung with FUTEX_WAKE (no spin)."""
    import ctypes
    futex = _futex()
    shm = shared_memory.SharedMemory(create=True, size=64)
    held = [(ctypes.c_uint32 * 16).from_buffer(shm.buf)]   # dropped before the mapping is closed
    base = ctypes.addressof(held[0])
    state = {"n": 0}

    def once() -> None:
        words = held[0]
        n = state["n"] = state["n"] + 1
        words[0] = n
        futex(base, _FUTEX_WAKE, 1)
        while words[1] != n:
            futex(base + 4, _FUTEX_WAIT, words[1])

    def stop() -> None:
        words = held[0]
        words[2] = 1
        words[0] = state["n"] + 1
        futex(base, _FUTEX_WAKE, 1)
    try:
        ctl, child_ctl = ctx.Pipe()
        p = ctx.Process(target=_child_futex_boot, args=(shm.name, _WORK["s"], child_ctl), daemon=True)
        p.start()
        out = _timed(calls, once)
        stop()
        p.join(5)
        return out
    finally:
        held.clear()
        shm.close()
        shm.unlink()


def _timed(calls: int, once: Callable[[], None]) -> list[float]:
    work_s = _WORK["s"]
    for _ in range(200):
        once()
    ts = []
    for _ in range(calls):
        _work(work_s)
        t0 = time.perf_counter()
        once()
        ts.append((time.perf_counter() - t0 - work_s) * 1e6)
    return ts


_ECHO = ("import sys, time; from qnnrt.runtime.ipc import child as c; end = c.child_end(sys.argv[2:]); "
         "w = c.SpinWait(); work = float(sys.argv[1])\n"
         "while True:\n"
         " f = w.recv(end)\n"
         " if not f or f == b'quit': break\n"
         " t = time.perf_counter() + work\n"
         " while time.perf_counter() < t: pass\n"
         " end.send(f)\n")


def bench_qnnrt(calls: int, yield_between: bool) -> list[float]:
    """qnnrt's channel: runtime/ipc/child.py's spawn (pipes and the doorbell), both sides in SpinWait."""
    from qnnrt.runtime.ipc import child
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path),
               **{child.SPIN_YIELD_ENV: "1" if yield_between else "0"})
    proc, end = child.spawn([sys.executable, "-c", _ECHO, str(_WORK["s"])], env)
    wait = child.SpinWait(yields=yield_between)
    msg = b"\x01" * 8

    def once() -> None:
        end.send(msg)
        wait.recv(end)
    try:
        return _timed(calls, once)
    finally:
        end.send(b"quit")
        child.stop(proc)
        end.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--spin-us", type=float, default=_SPIN_S * 1e6)
    ap.add_argument("--work-us", type=float, default=0.0,
                    help="each side's busy work per message (a segment's run, the main's own part)")
    args = ap.parse_args()
    _WORK["s"] = args.work_us * 1e-6
    ctx = mp.get_context("spawn")
    spin = args.spin_us * 1e-6
    cands: list[tuple[str, Callable[[], list[float]]]] = [
        ("pipe (os.pipe, blocking)", lambda: bench_pipe(ctx, args.calls)),
        ("socketpair (AF_UNIX)", lambda: bench_socketpair(ctx, args.calls)),
        ("multiprocessing.connection.Pipe", lambda: bench_connection(ctx, args.calls)),
        (f"shm flag, spin {args.spin_us:g} us then pipe", lambda: bench_shm(ctx, args.calls, "pipe", spin)),
        ("shm flag, pure spin", lambda: bench_shm(ctx, args.calls, "spin", spin)),
    ]
    if sys.platform.startswith("linux") and os.uname().machine in _FUTEX_NR:
        cands.append(("futex on a shared word (blocking, no spin)", lambda: bench_futex(ctx, args.calls)))
    if os.name == "posix":
        cands.append(("qnnrt channel: doorbell polled with sched_yield, then pipe",
                      lambda: bench_qnnrt(args.calls, True)))
        cands.append(("qnnrt channel: doorbell polled without yielding, then pipe",
                      lambda: bench_qnnrt(args.calls, False)))
    if hasattr(os, "eventfd"):
        cands.insert(3, ("eventfd (blocking, no spin)", lambda: bench_shm(ctx, args.calls, "eventfd", 0.0)))
        cands.insert(4, (f"shm flag, spin {args.spin_us:g} us then eventfd",
                         lambda: bench_shm(ctx, args.calls, "eventfd", spin)))
    if args.work_us:   # the candidates whose child works before it answers
        cands = [c for c in cands if c[0].startswith(("pipe", "futex", "qnnrt"))]
    print(f"load average before: {os.getloadavg()}  python {sys.version.split()[0]}  calls {args.calls}"
          f"  work {args.work_us:g} us a side")
    print("| channel | median us | p90 us | p99 us |")
    print("| --- | --- | --- | --- |")
    for name, fn in cands:
        ts = fn()
        print(f"| {name} | {statistics.median(ts):.1f} | {_pct(ts, 0.9):.1f} | {_pct(ts, 0.99):.1f} |",
              flush=True)
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
