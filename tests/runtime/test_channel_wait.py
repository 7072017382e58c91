"""How a side of a child channel waits (runtime/ipc/child.py): the doorbell page counts frames so a poll
reads memory, not the pipe; a poll is bounded by what the work is expected to take and by the cap,
then the pipe read blocks, so a stuck or dead peer costs no core; and a multi-PD program's worker
reads the clock only when the main process's plan does."""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import pytest

import qnnrt
from qnnrt.runtime.ipc import child
from tests.helpers.qnn_fixtures import WIDTH

posix = pytest.mark.skipif(not child.use_pipes(), reason="the doorbell comes with the pipe transport")


def _bell_pair() -> tuple[child.PipeEnd, child.PipeEnd]:
    """(parent's end, child's end) in this process, over two pipes and one doorbell page."""
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    fd = child.new_bell_fd()
    return (child.PipeEnd(b_r, a_w, child.Doorbell(fd, child=False)),
            child.PipeEnd(a_r, b_w, child.Doorbell(os.dup(fd), child=True)))


@posix
def test_the_doorbell_says_a_frame_arrived_before_it_is_read():
    parent, kid = _bell_pair()
    try:
        assert not kid.arrived() and not parent.arrived()
        parent.send(b"one")
        parent.send(b"two")
        assert kid.arrived() and not parent.arrived()
        assert kid.recv() == b"one" and kid.arrived()   # the second frame: still counted as there
        assert kid.recv() == b"two" and not kid.arrived()
        kid.send(b"back")
        assert parent.arrived() and parent.recv() == b"back" and not parent.arrived()
    finally:
        parent.close()
        kid.close()


@posix
def test_a_spawned_child_gets_the_doorbell_and_answers_through_it():
    script = ("import sys; from qnnrt.runtime.ipc import child as c; end = c.child_end(sys.argv[1:]); "
              "assert end.bell is not None; w = c.SpinWait()\n"
              "for _ in range(50): end.send(w.recv(end))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc, end = child.spawn([sys.executable, "-c", script], env)
    try:
        assert isinstance(end, child.PipeEnd) and end.bell is not None
        wait = child.SpinWait()
        for i in range(50):
            end.send(b"%d" % i)
            assert wait.recv(end) == b"%d" % i
        assert child.stop(proc) == 0
        assert wait.recv(end) == b""   # the child is gone: end-of-file, not a hang
    finally:
        child.stop(proc)
        end.close()


def test_the_poll_is_twice_the_expected_work_and_never_beyond_the_cap():
    w = child.SpinWait(cap_s=1e-3)
    w.took(0.0, 100e-6)
    assert w.budget_s() == pytest.approx(200e-6 + child.SPIN_SLACK_S)
    w.took(0.0, 900e-6)
    assert w.budget_s() == pytest.approx(1e-3)
    w.took(0.0, 1e-3)   # work as long as the cap (a real graph): block at once
    assert w.budget_s() == 0.0
    assert child.SpinWait(cap_s=0.0).budget_s() == 0.0   # QNNRT_SPIN_US=0: never poll


def test_spin_cap_and_yield_come_from_the_environment(monkeypatch):
    monkeypatch.setenv(child.SPIN_ENV, "250")
    monkeypatch.setenv(child.SPIN_YIELD_ENV, "1")
    assert child.spin_cap_s() == pytest.approx(250e-6) and child.spin_yields()
    monkeypatch.setenv(child.SPIN_ENV, "not a number")
    monkeypatch.delenv(child.SPIN_YIELD_ENV)
    assert child.spin_cap_s() == pytest.approx(child.SPIN_CAP_US * 1e-6) and not child.spin_yields()


@posix
@pytest.mark.parametrize("yields", [True, False])
def test_a_silent_peer_is_waited_for_in_the_pipe_not_by_polling(yields):
    """A peer that answers late (a stuck worker) costs the waiter its poll, then nothing: the
    wait blocks in the pipe read; the answer still arrives."""
    parent, kid = _bell_pair()
    try:
        w = child.SpinWait(cap_s=2e-3, yields=yields)
        w.took(0.0, 1e-3)   # a short segment: the poll lasts the cap at most
        threading.Timer(0.5, kid.send, (b"late",)).start()
        cpu0, t0 = time.process_time(), time.perf_counter()
        assert w.recv(parent) == b"late"
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        assert wall >= 0.45 and cpu < 0.1, (wall, cpu)
        assert w.blocked == 1
    finally:
        parent.close()
        kid.close()


@posix
def test_a_dead_peer_ends_the_wait_with_end_of_file():
    parent, kid = _bell_pair()
    w = child.SpinWait(cap_s=2e-3)
    w.took(0.0, 1e-3)
    threading.Timer(0.3, kid.close).start()
    cpu0 = time.process_time()
    try:
        assert w.recv(parent) == b""
        assert time.process_time() - cpu0 < 0.1
    finally:
        parent.close()


def test_a_worker_times_its_segment_only_when_the_plan_is_timed(chain12):
    """Untimed (the default), the worker's graph calls and CPU steps read no clock, as this
    process's do; timed, both sides' seconds are counted; the bits are the same."""
    x = {"x": np.random.default_rng(3).standard_normal((1, WIDTH)).astype(np.float32)}
    with qnnrt.load(chain12.model, residency="lazy") as p:
        ref = p.run(None, x)
    with qnnrt.load(chain12.model, residency="multi-pd:2",
                    options=qnnrt.LoadOptions(pd_budget="64MiB")) as p:
        untimed = p.run(None, x)
        assert p.timing.accelerator_s == 0.0 and p.timing.cpu_ops_s == 0.0
        p.timed = True
        timed = p.run(None, x)
        assert p.timing.accelerator_s > 0
        s = p.pool.summary()
    assert s["pds"] == 2 and sum(w["round_trips"] or 0 for w in s["pd_workers"]) >= 2
    for out in (untimed, timed):
        assert all(np.array_equal(out[k], ref[k]) for k in ref)


def test_the_policy_keeps_the_cheaper_way_and_tries_the_other_now_and_then():
    p = child.WaitPolicy()
    every, run = child.POLICY_EXPLORE
    window = child.POLICY_WINDOW
    for _ in range(window):   # polls first
        assert not p.choose()
        p.record(False, 500e-6)
    for _ in range(run):      # then tries the other way for a few waits
        assert p.choose()
        p.record(True, 100e-6)
    assert p.block and all(p.choose() for _ in range(every - run))   # blocking was cheaper: kept
    assert [p.choose() for _ in range(run)] == [False] * run          # polling tried again
    for _ in range(run):
        p.record(False, 600e-6)
    assert p.block
    for _ in range(child.POLICY_WINDOW):
        p.record(True, 900e-6)      # the machine changed: blocking got dear, polling is tried again
    assert not p.block


@posix
def test_the_parent_advises_the_child_how_to_wait():
    parent, kid = _bell_pair()
    try:
        kid_wait = child.SpinWait(cap_s=0.05)
        kid_wait.took(0.0, 0.01)     # would poll up to 20 ms
        parent.advise(True)
        assert kid.advised_to_block() and not parent.advised_to_block()
        threading.Timer(0.2, parent.send, (b"x",)).start()
        cpu0 = time.process_time()
        assert kid_wait.recv(kid) == b"x" and kid_wait.last_blocked
        assert time.process_time() - cpu0 < 0.015   # it did not poll
        parent.advise(False)
        assert not kid.advised_to_block()
    finally:
        parent.close()
        kid.close()
