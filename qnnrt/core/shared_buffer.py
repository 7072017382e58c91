"""Shared buffers: graph I/O in rpcmem, registered with QNN (memRegister), so the HTP reads and
writes it in place instead of copying every input and output between the CPU and the accelerator.

`SharedMemory` is a program's rpcmem (ExecuTorch's SharedBuffer + QnnMemManager, in one object):
- `array(shape, dtype)` allocates one rpcmem block per array (`RpcmemBlock`), the array at the
  block's start;
- `mem_handle(context, array, spec)` registers `array` with that context once and returns the
  Qnn_MemHandle_t a graph tensor of that context is bound to (`BoundCall.set_input_mem`): an array
  at a block's start as QNN_MEM_TYPE_ION (the block's fd, as ExecuTorch's RegisterIonMem does), a
  contiguous view further in (one layer of a fused KV cache) as QNN_MEM_TYPE_CUSTOM with the HTP's
  shared-buffer descriptor (the fd, the block's size, the view's offset: several tensors in one
  allocation, as ExecuTorch's RegisterCustomMem and ONNX Runtime's QNN EP do), so one copy can
  write a slot of every layer.
  A handle belongs to its context: a re-created context registers again. A refused memRegister is
  said once (`refused`) and from then on every array is passed as a raw client buffer;
- `close()` deregisters what is still registered, then frees every block (each QNN return code
  checked; a failed deregistration logged, never raised).
A context deregisters its registrations when it closes, before contextFree (`Context.close`), so
eviction and re-creation leave no handle behind. `SharedMemory.available()` says whether this
machine can make any.
"""
from __future__ import annotations

import ctypes as C
import logging
import threading
import weakref
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import DTypeLike

from qnnrt._capi import rpcmem
from qnnrt._capi import types as T
from qnnrt.core.freeing import check_free
from qnnrt.core.tensor import TensorSpec
from qnnrt.errors import QnnError, QnnrtError

if TYPE_CHECKING:
    from qnnrt.core.backend import Backend
    from qnnrt.core.context import Context

logger = logging.getLogger("qnnrt.core")

ALIGNMENT = 64            # bytes; ExecuTorch's default alignment for shared buffers
MAX_BLOCK_BYTES = 2 ** 31 - 1   # rpcmem_alloc takes an int size (rpcmem_alloc2 goes beyond)


def bind_mem_handle(tensor: T.Tensor, mem_handle: int) -> None:
    """Point a graph I/O tensor struct at registered memory (instead of a client buffer)."""
    body = tensor.body
    body.memType = T.TENSORMEMTYPE_MEMHANDLE
    body.memHandle = mem_handle


class RpcmemBlock:
    """One rpcmem allocation and the array over its start."""

    def __init__(self, fns: rpcmem.Rpcmem, shape: tuple[int, ...], dtype: np.dtype, name: str):
        self._fns = fns
        count = int(np.prod(shape, dtype=np.int64))
        self.nbytes = count * dtype.itemsize
        size = max(self.nbytes, 1)
        if size > MAX_BLOCK_BYTES:
            raise QnnrtError(f"shared buffer for {name}: {size} bytes is more than rpcmem_alloc "
                             f"takes ({MAX_BLOCK_BYTES}); run without --shared-buffer")
        self.base: int = fns.alloc(rpcmem.HEAP_ID_SYSTEM, rpcmem.DEFAULT_FLAGS, size) or 0
        if not self.base:
            raise QnnrtError(f"rpcmem_alloc of {size} bytes for {name} failed (out of shared "
                             f"memory?); run without --shared-buffer")
        if self.base % ALIGNMENT:
            self.free()
            raise QnnrtError(f"rpcmem_alloc gave {name} a start not aligned to {ALIGNMENT} bytes; "
                             f"this libcdsprpc ({fns.path}) cannot hold graph I/O")
        self.fd: int = fns.to_fd(self.base)
        if self.fd < 0:
            self.free()
            raise QnnrtError(f"rpcmem_to_fd found no file descriptor for {name}'s rpcmem "
                             f"({fns.path}); run without --shared-buffer")
        raw = (C.c_uint8 * size).from_address(self.base)
        self.array = np.frombuffer(memoryview(raw), dtype=dtype, count=count).reshape(shape)
        self.array[...] = 0

    def free(self) -> None:
        """Give the block back (idempotent); rpcmem_free returns nothing to check."""
        base, self.base = self.base, 0
        if base:
            self._fns.free(base)


class Registration:
    """One array registered with one context: its mem handle, until `close` deregisters it."""

    def __init__(self, memory: SharedMemory, context: Context, block: RpcmemBlock, offset: int,
                 nbytes: int, spec: TensorSpec):
        self.memory, self.context, self.name = memory, context, spec.name
        self._lock = threading.Lock()
        self._closed = True
        dims = (T.u32 * max(1, len(spec.shape)))(*spec.shape)
        desc = T.MemDescriptor(dataType=spec.data_type)
        desc.memShape.numDim = len(spec.shape)
        desc.memShape.dimSize = dims
        htp = T.HtpMemDescriptor(type=T.HTP_MEM_SHARED_BUFFER, size=block.nbytes)
        self.view = offset > 0 or nbytes < block.nbytes
        if self.view:
            htp.sharedBufferConfig.fd = block.fd
            htp.sharedBufferConfig.offset = offset
            desc.memType = T.MEM_TYPE_CUSTOM
            desc.customInfo = C.cast(C.pointer(htp), C.c_void_p)
        else:
            desc.memType = T.MEM_TYPE_ION
            desc.ionFd = block.fd
        handle = C.c_void_p()
        be = context.backend
        mark = be.log.mark()
        rc = be.api.memRegister(context.handle, C.byref(desc), 1, C.byref(handle))
        be.check(rc, "memRegister", mark, f"for tensor {spec.name!r} of {context.name}")
        self.mem_handle: int = handle.value or 0
        self._closed = False
        context.track_shared_buffer(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """memDeRegister, once (the context calls it before contextFree)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            h = C.c_void_p(self.mem_handle)
            ok = check_free(self.context.backend.api.memDeRegister(C.byref(h), 1), "memDeRegister",
                            f"shared buffer {self.name!r} of {self.context.name}")
            self.memory.deregistered(ok)


class SharedMemory:
    """A program's shared buffers. See the module docstring."""

    @staticmethod
    def available() -> tuple[bool, str]:
        fns, why = rpcmem.load()
        return fns is not None, why

    def __init__(self, backend: Backend):
        fns, why = rpcmem.load()
        if fns is None:
            raise QnnrtError(f"cannot make shared buffers: {why}")
        self.backend = backend
        self._fns = fns
        self._lock = threading.Lock()
        self._counts = threading.Lock()   # counters, also updated by a closing context
        self._blocks: dict[int, RpcmemBlock] = {}   # by start address
        # per context, by the registered array's (address, bytes): a layer's view at a block's
        # start is not the whole block
        self._registered: weakref.WeakKeyDictionary[Context, dict[tuple[int, int], Registration]] = \
            weakref.WeakKeyDictionary()
        self.refused = ""          # why memRegister is not used (said once), or ''
        self.allocations = 0       # blocks made
        self.frees = 0             # blocks given back
        self.registrations = 0     # memRegister calls that succeeded
        self.registered_views = 0  # of them, parts of a block (the custom descriptor)
        self.deregistrations = 0   # memDeRegister calls that succeeded
        self.failed_deregistrations = 0
        self.closed = False

    @property
    def library(self) -> str:
        return self._fns.path

    def array(self, shape: tuple[int, ...], dtype: DTypeLike, name: str = "a graph tensor"
              ) -> np.ndarray:
        """A zeroed array in a block of its own."""
        with self._lock:
            if self.closed:
                raise QnnrtError("the program's shared buffers were freed (program closed)")
            block = RpcmemBlock(self._fns, tuple(shape), np.dtype(dtype), name)
            self._blocks[block.base] = block
            self.allocations += 1
            return block.array

    def free(self, array: np.ndarray) -> None:
        """Give back the block `array` starts (deregistering what was registered in it first)."""
        with self._lock:
            block = self._blocks.pop(array.ctypes.data, None)
            if block is None:
                return
            inside = range(block.base, block.base + max(block.nbytes, 1))
            regs = [by_array.pop(key) for by_array in self._registered.values()
                    for key in [k for k in by_array if k[0] in inside]]
        for r in regs:
            r.close()
        block.free()
        with self._lock:
            self.frees += 1

    def _block_of(self, array: np.ndarray) -> tuple[RpcmemBlock, int] | None:
        """The block `array` lies in, contiguous, and its offset there (None: not in one)."""
        if not array.flags.c_contiguous:
            return None
        at = array.ctypes.data
        block = self._blocks.get(at)
        if block is not None:
            return (block, 0) if array.nbytes <= block.nbytes else None
        for b in self._blocks.values():
            if b.base <= at and at + array.nbytes <= b.base + b.nbytes:
                return b, at - b.base
        return None

    def holds(self, array: np.ndarray) -> bool:
        """Does `array` lie, contiguous, in one of this memory's blocks (so it can be bound as a
        mem handle)?"""
        return self._block_of(array) is not None

    def mem_handle(self, context: Context, array: np.ndarray, spec: TensorSpec) -> int | None:
        """The handle binding `array` into graphs of `context` (registered on first use), or None
        when memRegister was refused (then pass `array` as a raw buffer)."""
        with self._lock:
            if self.refused:
                return None
            found = self._block_of(array)
            if found is None:
                raise QnnrtError(f"the shared buffer of {spec.name!r} was freed; it cannot be "
                                 f"bound into {context.name}")
            block, offset = found
            regs = self._registered.setdefault(context, {})
            key = (array.ctypes.data, array.nbytes)
            r = regs.get(key)
            if r is not None and not r.closed:
                return r.mem_handle
            try:
                r = regs[key] = Registration(self, context, block, offset, array.nbytes, spec)
            except QnnError as e:
                self.refused = (f"memRegister refused the shared buffer of {spec.name!r} in "
                                f"{context.name} (QNN error {e.code}, {e.code_name}); graph I/O is "
                                f"passed as raw buffers")
                logger.warning("%s", self.refused)
                return None
        with self._counts:
            self.registrations += 1
            self.registered_views += r.view
        return r.mem_handle

    def deregistered(self, ok: bool) -> None:
        with self._counts:
            if ok:
                self.deregistrations += 1
            else:
                self.failed_deregistrations += 1

    def counts(self) -> dict[str, int]:
        """What the report says of it."""
        with self._lock:
            live = sum(b.nbytes for b in self._blocks.values()) if not self.closed else 0
            made = {"buffers": self.allocations, "freed": self.frees, "live_bytes": live}
        with self._counts:
            return {**made, "registered": self.registrations,
                    "registered_views": self.registered_views,
                    "deregistered": self.deregistrations,
                    "failed_deregistrations": self.failed_deregistrations}

    def close(self) -> None:
        """Deregister what is still registered, then free every block. Idempotent; arrays made
        here must not be used afterwards."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            regs = [r for by_array in list(self._registered.values()) for r in by_array.values()]
            self._registered.clear()
            blocks = list(self._blocks.values())
            self._blocks.clear()
        for r in regs:
            r.close()
        for b in blocks:
            b.free()
        with self._lock:
            self.frees += len(blocks)

    def __repr__(self) -> str:
        c = self.counts()
        return (f"SharedMemory({c['buffers']} buffers, {c['live_bytes']} B live, {c['registered']} "
                f"registered{', refused' if self.refused else ''})")
