"""Child processes qnnrt talks to (the PD workers, the vetting child): one framing, one transport
choice, one way to spawn with a channel and one way to stop.

Transport (bench/bench_channel.py, bench/RESULTS.md): a pair of anonymous pipes on POSIX, each
frame written with one write() and read with one read() (a round trip was the cheapest measured
here; spinning on a shared flag loses badly on a loaded 2-core machine); elsewhere (Windows) a
multiprocessing.connection (a named pipe). A child that dies closes its end: the other side reads
end-of-file, never hangs. The channel is a pipe pair of its own, never stdout: a C library that
prints there cannot corrupt a frame.

Frame: kind (1 byte), the request id (u32), then the body. C a control request, R its reply, E a
failure, P a progress report on a request still running, each a frozen dataclass of the protocol
that uses them (runtime/pd_protocol.py, runtime/vet_protocol.py) on the typed wire (runtime/wire.py:
no pickle); each protocol may add fixed binary frames of its own for its hot path
(runtime/pd_channel.py).
"""
from __future__ import annotations

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
SPIN_CAP_US = 1000.0             # a wait that took longer than this blocks next time, no polling
SPIN_SLACK_S = 20e-6


def use_pipes() -> bool:
    """Anonymous pipes passed at spawn (POSIX); else a multiprocessing connection."""
    return os.name == "posix"


# -- transports ----------------------------------------------------------------------------------
class PipeEnd:
    """One side of the channel over two pipe descriptors (read, write). Frames are length-prefixed;
    bytes read past the end of a frame are kept for the next one (a child that reports as it goes
    can have several frames in the pipe at once)."""

    def __init__(self, rfd: int, wfd: int):
        self.rfd, self.wfd = rfd, wfd
        self._buf = b""

    def send(self, data: bytes) -> None:
        n = os.write(self.wfd, _U32.pack(len(data)) + data)
        if n != len(data) + 4:  # a large control message: write the rest
            view = memoryview(_U32.pack(len(data)) + data)[n:]
            while view:
                view = view[os.write(self.wfd, view):]

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
        return buf[4:want]

    def close(self) -> None:
        for fd in (self.rfd, self.wfd):
            try:
                os.close(fd)
            except OSError:
                pass


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


class SpinWait:
    """Reading the next frame of a wait that is usually short: poll for about as long as the last
    such wait took, then block. A process that blocked costs two scheduler wake-ups to get its
    answer (bench/RESULTS.md: ~100-500 us on an idle VM, more than a short plan segment's whole
    work), a poll a few microseconds; a wait longer than the cap (a real graph, a slow simulator)
    blocks at once, so no core is burnt while the accelerator works."""

    def __init__(self, cap_s: float | None = None) -> None:
        self.cap_s = spin_cap_s() if cap_s is None else cap_s
        self.last_s = 0.0

    def recv(self, end: PipeEnd | ConnEnd) -> bytes:
        t0 = time.perf_counter()
        if self.last_s < self.cap_s:
            deadline = t0 + min(self.cap_s, 1.5 * self.last_s + SPIN_SLACK_S)
            while not end.ready(0.0) and time.perf_counter() < deadline:
                pass
        frame = end.recv()
        self.last_s = time.perf_counter() - t0
        return frame


# -- spawning and stopping ---------------------------------------------------------------------------
def spawn(command: list[str], env: dict[str, str], **popen: Any) -> tuple[subprocess.Popen, PipeEnd | ConnEnd]:
    """Start `command` (whose last arguments the child passes to `child_end`) with a channel."""
    if use_pipes():
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            proc = subprocess.Popen([*command, "fds", str(req_r), str(rep_w)], env=env,
                                    pass_fds=(req_r, rep_w), **popen)
        finally:
            os.close(req_r)
            os.close(rep_w)
        return proc, PipeEnd(rep_r, req_w)
    from multiprocessing.connection import Listener
    key = os.urandom(16)
    with Listener(authkey=key) as listener:
        proc = subprocess.Popen([*command, "conn", str(listener.address)],
                                env=dict(env, **{KEY_ENV: key.hex()}), **popen)
        return proc, ConnEnd(listener.accept())


def child_end(argv: list[str]) -> PipeEnd | ConnEnd:
    """The child's end of the channel `spawn` made, from the arguments it passed."""
    if argv[0] == "fds":
        return PipeEnd(int(argv[1]), int(argv[2]))
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
