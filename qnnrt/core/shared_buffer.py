"""SharedBuffer: one graph tensor's memory in rpcmem, registered with QNN (memRegister), so the HTP
reads and writes it in place: no copy between the CPU and the accelerator.

`SharedBuffer(context, spec)` allocates rpcmem for `spec` (size + alignment), registers its file
descriptor with the context (QNN_MEM_TYPE_ION, the tensor's shape and data type, as ExecuTorch's
QnnMemManager::RegisterIonMem does) and exposes:
- `array`: a numpy array over the rpcmem, of spec.dtype and spec.shape (write inputs into it, read
  outputs from it; never rebind it);
- `mem_handle`: the Qnn_MemHandle_t (an int) to put in the graph tensor.
How a graph call uses it: `bind_mem_handle(tensor, buf.mem_handle)` sets the Qnn_Tensor_t of that
input/output to memType = QNN_TENSORMEMTYPE_MEMHANDLE (1) with the handle in its union instead of a
clientBuf, once, when the call's I/O structs are made (core.graph.BoundCall); graphExecute then
reads/writes `array` in place, and the caller neither copies nor rebinds per call.
`close()` deregisters, then frees the rpcmem (idempotent); the context closes its buffers before it
is freed. `SharedBuffer.available()` says whether this machine can make any.
"""
from __future__ import annotations

import ctypes as C
import threading
from typing import TYPE_CHECKING

import numpy as np

from qnnrt._capi import rpcmem
from qnnrt._capi import types as T
from qnnrt.core.tensor import TensorSpec

if TYPE_CHECKING:
    from qnnrt.core.context import Context
from qnnrt.errors import QnnrtError

ALIGNMENT = 64   # bytes; ExecuTorch aligns shared buffers the same way (its default alignment)


def bind_mem_handle(tensor: T.Tensor, mem_handle: int) -> None:
    """Point a graph I/O tensor struct at registered memory (instead of a client buffer)."""
    body = tensor.body
    body.memType = T.TENSORMEMTYPE_MEMHANDLE
    body.memHandle = mem_handle


def aligned_layout(nbytes: int, alignment: int = ALIGNMENT) -> int:
    """Bytes to ask rpcmem for, so an `alignment`-aligned start still leaves `nbytes`."""
    if nbytes < 0 or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"bad size {nbytes} or alignment {alignment}")
    return nbytes + alignment


class SharedBuffer:
    """An rpcmem-backed numpy array registered with a context. See the module docstring."""

    @staticmethod
    def available() -> tuple[bool, str]:
        fns, why = rpcmem.load()
        return fns is not None, why

    def __init__(self, context: Context, spec: TensorSpec):
        fns, why = rpcmem.load()
        if fns is None:
            raise QnnrtError(f"cannot make a shared buffer for {spec.name!r}: {why}")
        self._fns = fns
        self.context = context
        self.spec = spec
        self._lock = threading.Lock()
        self._closed = True
        dtype = spec.dtype
        nbytes = int(np.prod(spec.shape, dtype=np.int64)) * dtype.itemsize
        total = aligned_layout(nbytes)
        self._base = fns.alloc(rpcmem.HEAP_ID_SYSTEM, rpcmem.DEFAULT_FLAGS, total)
        if not self._base:
            raise QnnrtError(f"rpcmem_alloc of {total} bytes for {spec.name!r} failed (out of "
                             f"shared memory?)")
        start = -(-self._base // ALIGNMENT) * ALIGNMENT
        self.array = np.frombuffer(memoryview((C.c_uint8 * nbytes).from_address(start)), dtype=dtype) \
            .reshape(spec.shape)
        self.fd = fns.to_fd(self._base)
        self._dims = (T.u32 * len(spec.shape))(*spec.shape)
        desc = T.MemDescriptor(memType=T.MEM_TYPE_ION, dataType=spec.data_type)
        desc.memShape.numDim = len(spec.shape)
        desc.memShape.dimSize = self._dims
        desc.ionFd = self.fd
        handle = C.c_void_p()
        be = context.backend
        mark = be.log.mark()
        rc = be.api.memRegister(context.handle, C.byref(desc), 1, C.byref(handle))
        if rc != 0:
            fns.free(self._base)
            self._base = None
        be.check(rc, "memRegister", mark, f"for tensor {spec.name!r} of {context.name}")
        self.mem_handle: int = handle.value or 0
        self._closed = False
        context.track_shared_buffer(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Deregister, then free the rpcmem. Idempotent; the array must not be used afterwards."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            h = C.c_void_p(self.mem_handle)
            try:
                self.context.backend.api.memDeRegister(C.byref(h), 1)
            finally:
                if self._base:
                    self._fns.free(self._base)
                    self._base = None

    def __repr__(self) -> str:
        return f"SharedBuffer({self.spec.name!r}, {self.array.nbytes} B, fd {self.fd})"
