"""The PD worker channel: its fixed binary frames (the hot path), the `Channel` that matches replies
to requests, and the shared tensor arena. Transports and the frame header are runtime/ipc/child.py's,
shared with the vetting child.

Frames (kind, request id, body): X a graph call (the bound call's id) and K its reply (seconds
inside graphExecute, then the QNN profile events when profiled); S a plan segment's run and D its
reply (runtime/hosts/pd/segment.py); C a control request, R its reply and E a failure, each a
`protocol` dataclass as the typed wire encodes it (runtime/ipc/wire.py; no pickle). A reply's tail
(K's, D's) is such a message too, encoded by the caller: this module carries bytes.

Tensors never travel in messages: they live in arena segments, files mapped by both sides (a memfd
on Linux, reached by the worker through /proc/<pid>/fd; a temporary file elsewhere).
"""
from __future__ import annotations

import mmap
import os
import struct
import sys
import tempfile
import threading
from dataclasses import dataclass

import numpy as np
from numpy.typing import DTypeLike

from qnnrt.core.tensor import address_of
from qnnrt.runtime.ipc.child import (  # noqa: F401 - the channel's own vocabulary, used as ch.*
    CONTROL, ERROR, REPLY, ConnEnd, PipeEnd, ProtocolError, SpinWait, WaitPolicy, body_frame,
    frame_body, frame_head)

CALL, OK = b"X", b"K"
SEGMENT, DONE = b"S", b"D"
SEGMENT_BYTES = 4 << 20   # the smallest arena segment
ALIGN = 64


# -- frames ---------------------------------------------------------------------------------------
# Every frame: kind (1 byte), the request id (u32), then the body. A graph call and its reply are
# fixed binary frames (the hot path); control requests and replies are protocol.py's dataclasses on
# the typed wire.
_CALL = struct.Struct("<cII")      # kind, request id, call id
_OK = struct.Struct("<cId")        # kind, request id, seconds inside graphExecute


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
               tail: bytes = b"") -> bytes:
    """A segment run's reply: seconds inside graphExecute, in the CPU steps, and in the whole run
    (the rest of a round trip is the channel's), then the tail (an encoded protocol.SegmentTail)
    if any."""
    return _DONE.pack(DONE, request_id, accelerator_s, cpu_s, busy_s) + tail


def parse_done(frame: bytes) -> tuple[float, float, float, bytes]:
    """(seconds in graphExecute, in CPU steps, in the whole run, the tail: b'' when none) of a
    DONE frame."""
    _, _, accelerator_s, cpu_s, busy_s = _DONE.unpack_from(frame)
    return accelerator_s, cpu_s, busy_s, frame[_DONE.size:]


def ok_frame(request_id: int, seconds: float, tail: bytes = b"") -> bytes:
    """A call's reply: the seconds inside graphExecute, then its tail (an encoded
    protocol.CallTail: the call's QNN profile events when profiled, trace events when tracing)
    if any."""
    return _OK.pack(OK, request_id, seconds) + tail


def parse_ok(frame: bytes) -> tuple[float, bytes]:
    """(seconds, the tail: b'' when none) of an OK frame."""
    return _OK.unpack_from(frame)[2], frame[_OK.size:]


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

    def call(self, call_id: int, wait: SpinWait | None = None) -> bytes:
        """Run bound call `call_id`; its reply frame (b'' when the worker is gone). `wait`: how
        this call's replies are waited for (runtime/ipc/child.py SpinWait)."""
        with self.lock:
            rid = self._new_id()
            self.end.send(_CALL.pack(CALL, rid, call_id))
            return self._reply(rid, wait=wait)

    def segment(self, segment: int, start: int, wait: SpinWait | None = None) -> bytes:
        """Run installed segment `segment` from step `start`; its reply frame (b'' when gone)."""
        with self.lock:
            rid = self._new_id()
            self.end.send(_SEGMENT.pack(SEGMENT, rid, segment, start))
            return self._reply(rid, wait=wait)

    def request(self, message: bytes, timeout: float | None = None) -> bytes:
        """Send a control request (an encoded message); its reply frame (b'' when the worker is
        gone). With `timeout`, a reply not begun within that many seconds is a TimeoutError (and
        dropped if it comes)."""
        with self.lock:
            rid = self._new_id()
            self.end.send(body_frame(CONTROL, rid, message))
            return self._reply(rid, timeout)

    def begin(self, message: bytes) -> int:
        """Send a request whose reply `finish` reads later (workers start side by side)."""
        with self.lock:
            rid = self._new_id()
            self.end.send(body_frame(CONTROL, rid, message))
            self._waiting.add(rid)
            return rid

    def finish(self, rid: int) -> bytes:
        with self.lock:
            self._waiting.discard(rid)
            early = self._early.pop(rid, None)
            return early if early is not None else self._reply(rid)

    def _reply(self, rid: int, timeout: float | None = None, wait: SpinWait | None = None) -> bytes:
        try:
            while True:
                if timeout is not None and not self.end.ready(timeout):
                    raise TimeoutError(f"no reply to request {rid} within {timeout:g} s")
                frame = wait.recv(self.end) if wait is not None else self.end.recv()
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
