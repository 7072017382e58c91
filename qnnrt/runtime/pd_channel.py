"""The request/reply channel between the main process and a PD worker, and the shared tensor arena.

Transport (bench/bench_channel.py, bench/RESULTS.md): a pair of anonymous pipes on POSIX, each
message written with one write() and read with one read() (a round trip was the cheapest measured
here; spinning on a shared flag loses badly on a loaded 2-core machine); elsewhere (Windows) a
multiprocessing.connection (a named pipe). A worker that dies closes its end: the main side reads
end-of-file and raises `WorkerGone`, never hangs.

Frames (kind, request id, body): X a graph call (the bound call's id) and K its reply (seconds
inside graphExecute, then the QNN profile events when profiled); C a control request, R its reply
and E a failure, each a pickled `pd_protocol` dataclass. `Channel` matches replies to requests.

Tensors never travel in messages: they live in arena segments, files mapped by both sides (a memfd
on Linux, reached by the worker through /proc/<pid>/fd; a temporary file elsewhere).
"""
from __future__ import annotations

import mmap
import os
import pickle
import struct
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from qnnrt.core.tensor import address_of
from qnnrt.errors import QnnrtError

CALL, OK, CONTROL, REPLY, ERROR = b"X", b"K", b"C", b"R", b"E"
SEGMENT, DONE = b"S", b"D"
_U32 = struct.Struct("<I")
_MAX_READ = 1 << 16
SEGMENT_BYTES = 4 << 20   # the smallest arena segment
ALIGN = 64


class WorkerGone(QnnrtError):
    """The worker process ended (a crash inside QNN, a kill) while a request was pending."""


def use_pipes() -> bool:
    """Anonymous pipes passed at spawn (POSIX); else a multiprocessing connection."""
    return os.name == "posix"


# -- transports ----------------------------------------------------------------------------------
class PipeEnd:
    """One side of the channel over two pipe descriptors (read, write)."""

    def __init__(self, rfd: int, wfd: int):
        self.rfd, self.wfd = rfd, wfd

    def send(self, data: bytes) -> None:
        n = os.write(self.wfd, _U32.pack(len(data)) + data)
        if n != len(data) + 4:  # a large control message: write the rest
            view = memoryview(_U32.pack(len(data)) + data)[n:]
            while view:
                view = view[os.write(self.wfd, view):]

    def ready(self, timeout: float) -> bool:
        """True when a message (or end-of-file) can be read within `timeout` seconds."""
        import select
        return bool(select.select([self.rfd], [], [], timeout)[0])

    def recv(self) -> bytes:
        """The next message; b'' when the other side is gone."""
        chunk = os.read(self.rfd, _MAX_READ)
        if len(chunk) < 4:
            return b""
        want = _U32.unpack_from(chunk)[0] + 4
        if len(chunk) == want:
            return chunk[4:]
        parts = [chunk]
        have = len(chunk)
        while have < want:
            more = os.read(self.rfd, min(_MAX_READ, want - have))
            if not more:
                return b""
            parts.append(more)
            have += len(more)
        return b"".join(parts)[4:]

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


# -- frames ---------------------------------------------------------------------------------------
# Every frame: kind (1 byte), the request id (u32), then the body. A graph call and its reply are
# fixed binary frames (the hot path); control requests and replies are pickled pd_protocol
# dataclasses.
_HEAD = struct.Struct("<cI")
_CALL = struct.Struct("<cII")      # kind, request id, call id
_OK = struct.Struct("<cId")        # kind, request id, seconds inside graphExecute


class ProtocolError(QnnrtError):
    """A frame that breaks the protocol (malformed, or a reply to no request): a bug in qnnrt."""


def call_frame(request_id: int, call_id: int) -> bytes:
    return _CALL.pack(CALL, request_id, call_id)


def parse_call(frame: bytes) -> tuple[int, int]:
    """(request id, call id) of a call frame."""
    _, rid, call_id = _CALL.unpack_from(frame)
    return rid, call_id


_SEGMENT = struct.Struct("<cIII")  # kind, request id, segment id, first step
_DONE = struct.Struct("<cIddd")    # kind, request id, seconds in graphExecute, in CPU steps, in all


def segment_frame(request_id: int, segment: int, start: int) -> bytes:
    return _SEGMENT.pack(SEGMENT, request_id, segment, start)


def parse_segment(frame: bytes) -> tuple[int, int, int]:
    """(request id, segment id, first step) of a segment frame."""
    _, rid, segment, start = _SEGMENT.unpack_from(frame)
    return rid, segment, start


def done_frame(request_id: int, accelerator_s: float, cpu_s: float, busy_s: float,
               tail: object = None) -> bytes:
    """A segment run's reply: seconds inside graphExecute, in the CPU steps, and in the whole run
    (the rest of a round trip is the channel's), then the tail (pd_protocol.SegmentTail) if any."""
    head = _DONE.pack(DONE, request_id, accelerator_s, cpu_s, busy_s)
    return head if tail is None else head + pickle.dumps(tail, protocol=pickle.HIGHEST_PROTOCOL)


def parse_done(frame: bytes) -> tuple[float, float, float, Any]:
    """(seconds in graphExecute, in CPU steps, in the whole run, the tail or None) of a DONE frame."""
    _, _, accelerator_s, cpu_s, busy_s = _DONE.unpack_from(frame)
    tail = pickle.loads(frame[_DONE.size:]) if len(frame) > _DONE.size else None
    return accelerator_s, cpu_s, busy_s, tail


def ok_frame(request_id: int, seconds: float, events: list[dict] | None = None) -> bytes:
    """A call's reply: the seconds inside graphExecute, then the call's QNN profile events when
    the call is profiled."""
    head = _OK.pack(OK, request_id, seconds)
    return head if events is None else head + pickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL)


def parse_ok(frame: bytes) -> tuple[float, list[dict] | None]:
    """(seconds, profile events or None) of an OK frame."""
    seconds = _OK.unpack_from(frame)[2]
    return seconds, (pickle.loads(frame[_OK.size:]) if len(frame) > _OK.size else None)


def object_frame(kind: bytes, request_id: int, obj: object) -> bytes:
    return _HEAD.pack(kind, request_id) + pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def frame_head(frame: bytes) -> tuple[bytes, int]:
    """(kind, request id) of a frame; ProtocolError when it is too short to have them."""
    if len(frame) < _HEAD.size:
        raise ProtocolError(f"a {len(frame)}-byte frame is shorter than a frame header")
    kind, rid = _HEAD.unpack_from(frame)
    return kind, rid


def parse_object(frame: bytes) -> Any:
    try:
        return pickle.loads(frame[_HEAD.size:])
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a malformed frame
        raise ProtocolError(f"a malformed {frame[:1]!r} frame: {type(e).__name__}: {e}") from None


class Channel:
    """The main process's end of one worker's channel. One request is on the wire at a time (a
    lock: any thread may ask), and a reply is matched to its request by id: the reply of a request
    whose caller gave up (an interrupt between send and reply) is dropped when it arrives, and a
    reply to no request is a ProtocolError, never another caller's answer."""

    def __init__(self, end: PipeEnd | ConnEnd):
        self.end = end
        self.lock = threading.Lock()
        self._last_id = 0
        self._waiting: set[int] = set()      # sent by `begin`, to be read by `finish`
        self._abandoned: set[int] = set()    # sent, whose caller no longer reads the reply
        self._early: dict[int, bytes] = {}   # `begin` replies read while reading another's

    @property
    def busy(self) -> bool:
        """A request is still being worked on by the worker (its reply not yet read)."""
        return bool(self._waiting or self._abandoned)

    def _new_id(self) -> int:
        self._last_id = (self._last_id + 1) & 0xFFFFFFFF
        return self._last_id

    def call(self, call_id: int) -> bytes:
        """Run bound call `call_id`; its reply frame (b'' when the worker is gone)."""
        with self.lock:
            rid = self._new_id()
            self.end.send(_CALL.pack(CALL, rid, call_id))
            return self._reply(rid)

    def segment(self, segment: int, start: int) -> bytes:
        """Run installed segment `segment` from step `start`; its reply frame (b'' when gone)."""
        with self.lock:
            rid = self._new_id()
            self.end.send(_SEGMENT.pack(SEGMENT, rid, segment, start))
            return self._reply(rid)

    def request(self, message: object, timeout: float | None = None) -> bytes:
        """Send a control request; its reply frame (b'' when the worker is gone). With `timeout`,
        a reply not begun within that many seconds is a TimeoutError (and dropped if it comes)."""
        with self.lock:
            rid = self._new_id()
            self.end.send(object_frame(CONTROL, rid, message))
            return self._reply(rid, timeout)

    def begin(self, message: object) -> int:
        """Send a request whose reply `finish` reads later (workers start side by side)."""
        with self.lock:
            rid = self._new_id()
            self.end.send(object_frame(CONTROL, rid, message))
            self._waiting.add(rid)
            return rid

    def finish(self, rid: int) -> bytes:
        with self.lock:
            self._waiting.discard(rid)
            early = self._early.pop(rid, None)
            return early if early is not None else self._reply(rid)

    def _reply(self, rid: int, timeout: float | None = None) -> bytes:
        try:
            while True:
                if timeout is not None and not self.end.ready(timeout):
                    raise TimeoutError(f"no reply to request {rid} within {timeout:g} s")
                frame = self.end.recv()
                if not frame:
                    return b""
                got = frame_head(frame)[1]
                if got == rid:
                    return frame
                if got in self._abandoned:
                    self._abandoned.discard(got)
                elif got in self._waiting:
                    self._early[got] = frame
                else:
                    raise ProtocolError(f"a reply to request {got}, which is not pending "
                                        f"(waiting for {rid})")
        except BaseException:
            self._abandoned.add(rid)   # an interrupt, or the frame above: its reply is dropped
            raise

    def settle(self, timeout: float) -> bool:
        """Read the replies of abandoned requests for up to `timeout` seconds; True when none is
        left (the worker is idle)."""
        with self.lock:
            while self._abandoned:
                if not self.end.ready(timeout):
                    return False
                frame = self.end.recv()
                if not frame:
                    return False
                self._abandoned.discard(frame_head(frame)[1])
            return not self._waiting


# -- the arena -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """Where an array lives in the arena: segment id, the path a worker maps it by, offset, size."""
    segment: int
    path: str
    offset: int
    nbytes: int


class Segment:
    """A file mapped read-write, shared with the workers by `path`."""

    def __init__(self, ident: int, size: int):
        self.id, self.size = ident, size
        self._fd: int | None = None
        self._tmp: str | None = None
        if sys.platform.startswith("linux") and hasattr(os, "memfd_create"):
            fd = os.memfd_create(f"qnnrt-pd-arena-{ident}")
            self.path = f"/proc/{os.getpid()}/fd/{fd}"
        else:
            fd, self._tmp = tempfile.mkstemp(prefix="qnnrt-pd-arena-")
            self.path = self._tmp
        os.ftruncate(fd, size)
        self._fd = fd
        self.map = mmap.mmap(fd, size)
        self.base = address_of(np.frombuffer(self.map, np.uint8, count=1))
        self.used = 0

    def close(self) -> None:
        """Let go of the mapping: it is unmapped when the last array into it goes (an array
        keeps its mmap as its base, but holds no buffer export, so closing it here would leave
        those arrays pointing at unmapped memory)."""
        self.map = None  # type: ignore[assignment]
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._tmp:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass


class Arena:
    """Bump allocator over segments; arrays it hands out are views into shared mappings."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []

    def alloc(self, shape: tuple, dtype: DTypeLike) -> tuple[np.ndarray, Block]:
        dt = np.dtype(dtype)
        nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dt.itemsize)
        seg = self.segments[-1] if self.segments else None
        if seg is None or seg.used + nbytes > seg.size:
            seg = Segment(len(self.segments), max(SEGMENT_BYTES, -(-nbytes // ALIGN) * ALIGN))
            self.segments.append(seg)
        off = seg.used
        seg.used = off + -(-nbytes // ALIGN) * ALIGN
        arr = np.ndarray(shape, dt, buffer=seg.map, offset=off)
        return arr, Block(seg.id, seg.path, off, arr.nbytes)

    def block_of(self, arr: np.ndarray) -> Block | None:
        """Where `arr` lives in the arena (C-contiguous, wholly inside one segment), else None."""
        if not arr.flags.c_contiguous:
            return None
        addr, n = address_of(arr), int(arr.nbytes)
        for s in self.segments:
            if s.base <= addr and addr + n <= s.base + s.size:
                return Block(s.id, s.path, addr - s.base, n)
        return None

    def close(self) -> None:
        for s in self.segments:
            s.close()
        self.segments.clear()


class ArenaView:
    """The worker's side: segments mapped on first use, arrays at a block's place."""

    def __init__(self) -> None:
        self._maps: dict[int, mmap.mmap] = {}

    def array(self, block: Block, shape: tuple, dtype: DTypeLike) -> np.ndarray:
        m = self._maps.get(block.segment)
        if m is None:
            with open(block.path, "r+b") as f:
                m = self._maps[block.segment] = mmap.mmap(f.fileno(), 0)
        return np.ndarray(shape, np.dtype(dtype), buffer=m, offset=block.offset)

    def close(self) -> None:
        self._maps.clear()   # each mapping goes with the last array into it (as Segment.close)
