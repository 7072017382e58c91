"""Child processes qnnrt talks to (the PD workers, the vetting child): one framing, one transport
choice, one way to spawn with a channel and one way to stop.

Transport (bench/bench_channel.py, bench/RESULTS.md): a pair of anonymous pipes on POSIX, each
frame written with one write() and read with one read(), plus a doorbell: a shared page where each
side counts the frames it has sent, so that a side waiting for a short answer polls a word in memory
(no system call) before it blocks on the pipe (`SpinWait`). Elsewhere (Windows) a
multiprocessing.connection (a named pipe), polled through the connection. A child that dies closes
its end: the other side reads end-of-file, never hangs (a poll of the doorbell is bounded, then the
pipe read blocks). The channel is a pipe pair of its own, never stdout: a C library that prints
there cannot corrupt a frame.

Frame: kind (1 byte), the request id (u32), then the body. C a control request, R its reply, E a
failure, P a progress report on a request still running, each a frozen dataclass of the protocol
that uses them (runtime/hosts/pd/protocol.py, runtime/vet/protocol.py) on the typed wire (runtime/ipc/wire.py:
no pickle); each protocol may add fixed binary frames of its own for its hot path
(runtime/hosts/pd/channel.py).
"""
from __future__ import annotations

import mmap
import os
import struct
import subprocess
import time
from typing import Any

from qnnrt.errors import QnnrtError

CONTROL, REPLY, ERROR, PROGRESS = b"C", b"R", b"E", b"P"
KEY_ENV = "QNNRT_CHILD_KEY"      # the multiprocessing connection's key (not on the command line)
_U32 = struct.Struct("<I")
_HEAD = struct.Struct("<cI")
_MAX_READ = 1 << 16
STOP_GRACE_S = 2.0               # a child asked to stop and still alive after this is killed
SPIN_ENV = "QNNRT_SPIN_US"
SPIN_YIELD_ENV = "QNNRT_SPIN_YIELD"
SPIN_CAP_US = 1000.0             # the longest poll; work expected to take longer blocks at once
SPIN_SLACK_S = 50e-6             # polled beyond twice the expected time before blocking
POLICY_WINDOW = 8                # round trips per way of waiting that its median is taken over
POLICY_EXPLORE = (256, 4)        # every 256 waits, 4 the other way (the machine may have changed)


def use_pipes() -> bool:
    """Anonymous pipes passed at spawn (POSIX); else a multiprocessing connection."""
    return os.name == "posix"


# -- transports ----------------------------------------------------------------------------------
_BELL_BYTES = 192                # two 64-bit counters a cache line apart (parent's, then child's),
_BELL_WORD = (0, 8)              # the counter each side writes, in 64-bit words: parent, child
_ADVICE_WORD = 16                # and the parent's advice: 1 while the child should block, not poll


def new_bell_fd() -> int:
    """A file for a doorbell page, to pass to a child (a memfd on Linux; elsewhere an unlinked
    temporary file)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("qnnrt-channel-bell")
    else:
        import tempfile
        fd, path = tempfile.mkstemp(prefix="qnnrt-channel-bell-")
        os.unlink(path)
    os.ftruncate(fd, _BELL_BYTES)
    return fd


class Doorbell:
    """Frame counters in a page both sides map: `ring` after each frame sent, `rung` how many the
    other side has sent. Each counter has one writer and is an aligned 64-bit word; the pipe
    write before a ring orders the frame's bytes before its count."""

    def __init__(self, fd: int, child: bool):
        self.fd = fd
        self.map = mmap.mmap(fd, _BELL_BYTES)
        self.words = memoryview(self.map).cast("Q")
        self.mine, self.theirs = _BELL_WORD[child], _BELL_WORD[not child]
        self.child = child
        self.sent = 0

    def ring(self) -> None:
        self.sent += 1
        self.words[self.mine] = self.sent

    def rung(self) -> int:
        return self.words[self.theirs]

    def advise(self, block: bool) -> None:
        """The parent's word on how the child waits for its next frame (see `WaitPolicy`)."""
        self.words[_ADVICE_WORD] = int(block)

    def advised_to_block(self) -> bool:
        """The child's reading of the parent's advice (the parent takes none)."""
        return self.child and bool(self.words[_ADVICE_WORD])

    def close(self) -> None:
        self.words.release()
        self.map.close()
        os.close(self.fd)


class PipeEnd:
    """One side of the channel over two pipe descriptors (read, write). Frames are length-prefixed;
    bytes read past the end of a frame are kept for the next one (a child that reports as it goes
    can have several frames in the pipe at once)."""

    def __init__(self, rfd: int, wfd: int, bell: Doorbell | None = None):
        self.rfd, self.wfd = rfd, wfd
        self.bell = bell
        self._buf = b""
        self._read = 0     # frames returned by recv (the doorbell counts the ones sent)

    def send(self, data: bytes) -> None:
        n = os.write(self.wfd, _U32.pack(len(data)) + data)
        if n != len(data) + 4:  # a large control message: write the rest
            view = memoryview(_U32.pack(len(data)) + data)[n:]
            while view:
                view = view[os.write(self.wfd, view):]
        if self.bell is not None:
            self.bell.ring()

    def arrived(self) -> bool:
        """A frame is there to read (or, without a doorbell, end-of-file): the cheap check a wait
        polls (a word in shared memory; a zero-timeout select without a doorbell)."""
        if self.bell is None:
            return self.ready(0.0)
        return self.bell.rung() != self._read or self._frame_ready()

    def advise(self, block: bool) -> None:
        """Tell the other side to block (True) or poll when it next waits (no-op without a bell)."""
        if self.bell is not None:
            self.bell.advise(block)

    def advised_to_block(self) -> bool:
        return self.bell is not None and self.bell.advised_to_block()

    def _frame_ready(self) -> bool:
        buf = self._buf
        return len(buf) >= 4 and len(buf) >= _U32.unpack_from(buf)[0] + 4

    def ready(self, timeout: float) -> bool:
        """True when a frame (or end-of-file) can be read within `timeout` seconds."""
        if self._frame_ready():
            return True
        import select
        return bool(select.select([self.rfd], [], [], timeout)[0])

    def recv(self) -> bytes:
        """The next frame's body; b'' when the other side is gone."""
        buf = self._buf
        while len(buf) < 4:
            more = os.read(self.rfd, _MAX_READ)
            if not more:
                return b""
            buf += more
        want = _U32.unpack_from(buf)[0] + 4
        if len(buf) < want:   # a large frame: gather it without re-copying what came before
            parts, have = [buf], len(buf)
            while have < want:
                more = os.read(self.rfd, max(_MAX_READ, want - have))
                if not more:
                    return b""
                parts.append(more)
                have += len(more)
            buf = b"".join(parts)
        self._buf = buf[want:]
        self._read += 1
        return buf[4:want]

    def close(self) -> None:
        for fd in (self.rfd, self.wfd):
            try:
                os.close(fd)
            except OSError:
                pass
        bell, self.bell = self.bell, None
        if bell is not None:
            bell.close()


class ConnEnd:
    """One side of the channel over a multiprocessing connection (the portable fallback)."""

    def __init__(self, conn: Any):
        self.conn = conn

    def send(self, data: bytes) -> None:
        self.conn.send_bytes(data)

    def ready(self, timeout: float) -> bool:
        try:
            return bool(self.conn.poll(timeout))
        except (EOFError, OSError):
            return True

    def arrived(self) -> bool:
        return self.ready(0.0)

    def advise(self, block: bool) -> None:
        pass

    def advised_to_block(self) -> bool:
        return False

    def recv(self) -> bytes:
        try:
            return self.conn.recv_bytes()
        except (EOFError, OSError):
            return b""

    def close(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass


# -- frames -----------------------------------------------------------------------------------------
class ProtocolError(QnnrtError):
    """A frame that breaks the protocol (malformed, or a reply to no request): a bug in qnnrt."""


def body_frame(kind: bytes, request_id: int, body: bytes) -> bytes:
    """A frame of `kind` carrying `body` as it is (a message its protocol encoded)."""
    return _HEAD.pack(kind, request_id) + body


def frame_body(frame: bytes) -> bytes:
    """What a frame carries after its header."""
    return frame[_HEAD.size:]


def frame_head(frame: bytes) -> tuple[bytes, int]:
    """(kind, request id) of a frame; ProtocolError when it is too short to have them."""
    if len(frame) < _HEAD.size:
        raise ProtocolError(f"a {len(frame)}-byte frame is shorter than a frame header")
    kind, rid = _HEAD.unpack_from(frame)
    return kind, rid


# -- waiting ------------------------------------------------------------------------------------------
def spin_cap_s() -> float:
    """The longest a side polls before it blocks ($QNNRT_SPIN_US, default SPIN_CAP_US; 0: never)."""
    try:
        return max(0.0, float(os.environ.get(SPIN_ENV, SPIN_CAP_US))) * 1e-6
    except ValueError:
        return SPIN_CAP_US * 1e-6


class WaitPolicy:
    """Whether the waits of one channel poll or block, chosen from what each has cost: the median of
    the last POLICY_WINDOW waits (a request's round trip, the work in it included) each way, the
    cheaper one kept and the other tried after the first window and then now and then
    (POLICY_EXPLORE). Polling wins while a
    core is free for each side (a wake-up from sleep costs ~100-500 us on an idle VM); blocking
    wins when every core is taken (a side that polls holds the core its peer needs, and a peer that
    slept gets the scheduler's credit when it wakes): bench/RESULTS.md. The parent's choice is the
    child's too (the doorbell's advice word), so one side measures for both."""

    def __init__(self) -> None:
        self.costs: dict[bool, list[float]] = {False: [], True: []}   # by "blocked"
        self.block = False
        self.waits = 0

    def choose(self) -> bool:
        """True: block this time."""
        self.waits += 1
        every, run = POLICY_EXPLORE
        if self.waits > POLICY_WINDOW and (self.waits - POLICY_WINDOW - 1) % every < run:
            return not self.block   # first right after a window of the default, then now and then
        return self.block

    def record(self, blocked: bool, seconds: float) -> None:
        costs = self.costs[blocked]
        costs.append(seconds)
        if len(costs) > POLICY_WINDOW:
            del costs[0]
        poll, block = self.costs[False], self.costs[True]
        if len(poll) >= POLICY_WINDOW // 2 and len(block) >= POLICY_WINDOW // 2:
            self.block = _median(block) < _median(poll)
        elif not poll:
            self.block = False


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


class SpinWait:
    """Reading the next frame of a wait that is usually short: poll for about twice as long as the
    work being waited for takes, then block. A process that blocked costs two scheduler wake-ups to
    get its answer (bench/RESULTS.md: ~100-500 us on an idle VM, more than a short plan segment's
    whole work), a poll well under a microsecond. Work expected to take longer than the cap (a real
    graph, a slow simulator) blocks at once, so no core is burnt while the accelerator works, and a
    poll never lasts longer than the cap: a stuck or dead peer is waited for in the pipe read.

    What is expected is the last wait, unless the caller knows better (`took`: the worker's own
    time for a segment, which a wake-up does not inflate). With a `WaitPolicy` (the main process's
    side of a segment's channel, told each round trip by `took`) a wait may block at once, and
    tells the other side to do the same; without one, a side follows that advice. A poller keeps
    its core (with `QNNRT_SPIN_YIELD=1` it calls sched_yield between polls: on a loaded machine
    that hands the core to another task until the next tick, and the answer waits unseen;
    bench/RESULTS.md)."""

    def __init__(self, cap_s: float | None = None, yields: bool | None = None,
                 policy: WaitPolicy | None = None) -> None:
        self.cap_s = spin_cap_s() if cap_s is None else cap_s
        self.pause = _yield if (spin_yields() if yields is None else yields) else _no_yield
        self.policy = policy
        self.expected_s = 0.0
        self.last_blocked = False   # the last wait blocked at once (policy or advice)
        self.blocked = 0     # waits that outlasted their poll (diagnostics, tests)

    def took(self, round_trip_s: float, work_s: float) -> None:
        """What the request just answered cost: `round_trip_s` from before it was sent (what the
        policy compares: a peer woken by the send may take this side's core at once, so the wait
        alone can look free) and `work_s`, the peer's own time in it (what the next poll expects:
        a wake-up does not inflate it)."""
        self.expected_s = work_s
        if self.policy is not None:
            self.policy.record(self.last_blocked, round_trip_s)

    def budget_s(self) -> float:
        """How long the next wait polls before it blocks."""
        if self.expected_s >= self.cap_s:
            return 0.0
        return min(self.cap_s, 2.0 * self.expected_s + SPIN_SLACK_S)

    def recv(self, end: PipeEnd | ConnEnd) -> bytes:
        clock = time.perf_counter
        t0 = clock()
        policy = self.policy
        if policy is not None:
            block = policy.choose()
            end.advise(block)
        else:
            block = end.advised_to_block()
        self.last_blocked = block
        if not block and not end.arrived():
            deadline = t0 + self.budget_s()
            arrived, pause = end.arrived, self.pause
            while not arrived():
                if clock() >= deadline:
                    self.blocked += 1
                    break
                pause()
        frame = end.recv()
        self.expected_s = clock() - t0
        return frame


def _no_yield() -> None:
    pass


_yield = getattr(os, "sched_yield", _no_yield)


def spin_yields() -> bool:
    """Whether a polling wait yields its core between polls ($QNNRT_SPIN_YIELD, default off)."""
    return os.environ.get(SPIN_YIELD_ENV, "0") not in ("", "0")


# -- spawning and stopping ---------------------------------------------------------------------------
def spawn(command: list[str], env: dict[str, str], **popen: Any) -> tuple[subprocess.Popen, PipeEnd | ConnEnd]:
    """Start `command` (whose last arguments the child passes to `child_end`) with a channel."""
    if use_pipes():
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        bell_fd = new_bell_fd()
        try:
            proc = subprocess.Popen([*command, "fds", str(req_r), str(rep_w), str(bell_fd)], env=env,
                                    pass_fds=(req_r, rep_w, bell_fd), **popen)
        except BaseException:
            os.close(bell_fd)
            raise
        finally:
            os.close(req_r)
            os.close(rep_w)
        return proc, PipeEnd(rep_r, req_w, Doorbell(bell_fd, child=False))
    from multiprocessing.connection import Listener
    key = os.urandom(16)
    with Listener(authkey=key) as listener:
        proc = subprocess.Popen([*command, "conn", str(listener.address)],
                                env=dict(env, **{KEY_ENV: key.hex()}), **popen)
        return proc, ConnEnd(listener.accept())


def child_end(argv: list[str]) -> PipeEnd | ConnEnd:
    """The child's end of the channel `spawn` made, from the arguments it passed."""
    if argv[0] == "fds":
        bell = Doorbell(int(argv[3]), child=True) if len(argv) > 3 else None
        return PipeEnd(int(argv[1]), int(argv[2]), bell)
    from multiprocessing.connection import Client
    return ConnEnd(Client(argv[1], authkey=bytes.fromhex(os.environ.pop(KEY_ENV, ""))))


def stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> int:
    """Wait up to `grace_s` for a child asked to stop (or one that ends on its own), then kill it;
    its exit status (negative: the signal that ended it)."""
    try:
        return proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
