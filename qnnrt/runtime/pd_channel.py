"""The request/reply channel between the main process and a PD worker, and the shared tensor arena.

Transport (bench/bench_channel.py, bench/RESULTS.md): a pair of anonymous pipes on POSIX, each
message written with one write() and read with one read() (a round trip was the cheapest measured
here; spinning on a shared flag loses badly on a loaded 2-core machine); elsewhere (Windows) a
multiprocessing.connection (a named pipe). A worker that dies closes its end: the main side reads
end-of-file and raises `WorkerGone`, never hangs.

Message = kind (1 byte) + payload. Kinds: X call (u32 call id), K ok (f64 seconds in graphExecute,
then the pickled QNN profile events when the call is profiled),
C control (pickle), R reply to a control (pickle), E error (pickle of (exception name, text,
QNN code or None, traceback, the QnnError's fields or None)).

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
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from qnnrt.core.tensor import address_of
from qnnrt.errors import QnnrtError

CALL, OK, CONTROL, REPLY, ERROR = b"X", b"K", b"C", b"R", b"E"
_U32 = struct.Struct("<I")
_F64 = struct.Struct("<d")
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


def call_message(call_id: int) -> bytes:
    return CALL + _U32.pack(call_id)


def ok_message(seconds: float) -> bytes:
    return OK + _F64.pack(seconds)


def profiled_ok_message(seconds: float, events: list[dict]) -> bytes:
    """A profiled call's reply: the seconds, then the QNN profile events the worker read."""
    return OK + _F64.pack(seconds) + pickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL)


def parse_events(msg: bytes) -> list[dict] | None:
    """The profile events of a profiled call's reply; None for a plain one."""
    return pickle.loads(msg[9:]) if len(msg) > 9 else None


def control_message(kind: bytes, obj: object) -> bytes:
    return kind + pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def parse_call(msg: bytes) -> int:
    return _U32.unpack_from(msg, 1)[0]


def parse_ok(msg: bytes) -> float:
    return _F64.unpack_from(msg, 1)[0]


def parse_pickle(msg: bytes) -> Any:
    return pickle.loads(msg[1:])


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
        try:
            self.map.close()
        except BufferError:  # arrays still point into it: the OS frees it when they go
            pass
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
        for m in self._maps.values():
            try:
                m.close()
            except BufferError:
                pass
        self._maps.clear()
