"""The one prepared graph call (`BoundCall`: the Qnn_Tensor_t arrays and graphExecute's arguments
made once, the C entry called without per-call argument conversion) and the shapes every
caller relies on: `PreparedCall` (what a binder calls: a `BoundCall` here, a PD worker's remote
call), `LiveGraph` (what a call is pointed at). The binder over it: binding.py."""
from __future__ import annotations

import ctypes as C
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from qnnrt._capi import types as T
from qnnrt._capi.log import DEFERRED
from qnnrt.core.binary import GraphSpec
from qnnrt.core.shared_buffer import SharedMemory, bind_mem_handle
from qnnrt.core.tensor import IOTensor
from qnnrt.errors import QnnrtError

if TYPE_CHECKING:
    from _ctypes import CFuncPtr

    from qnnrt.core.backend import Backend
    from qnnrt.core.context import Context
    from qnnrt.core.profile import Profile

_clock = time.perf_counter


def _untyped(fn: Callable[..., int]) -> CFuncPtr:
    """The same C entry without argument types: called with ready arguments only (pointers as
    `pointer_arg` / byref, counts as Python ints, NULL as None), it skips the per-call conversion
    of every argument, the larger part of a ctypes call's cost (bench/RESULTS.md)."""
    address = C.cast(fn, C.c_void_p).value  # type: ignore[arg-type]  # a CFuncPtr, typed by its signature
    if not address:
        raise QnnrtError("graphExecute is a NULL function pointer")
    return C.CFUNCTYPE(T.ErrorHandle)(address)


def pointer_arg(handle: C.c_void_p | None) -> object:
    """`handle`'s value as an argument of an untyped call, in the form ctypes passes on without
    work: a byref (ctypes' own argument object, copied as it is) of a zero-size view at that
    address, i.e. the address itself. A c_void_p would make ctypes build that object anew at every
    call; nothing is read at the address. NULL (None, an empty handle) passes as None."""
    value = handle.value if handle is not None else None
    return C.byref(C.c_char.from_address(value)) if value else None


class BoundCall:
    """One graph's graphExecute over I/O structs made once: the caller points each input and output
    at an array it validated or planned (and keeps alive), sets `handle` to the live graph's handle,
    then calls. Nothing is checked here; a failed call raises QnnError with QNN's log, and an
    interrupt the log callback deferred is raised after the call returns. A call returns the
    seconds it spent inside QNN, or 0.0 when `timed` is False (no clock read: what an untimed
    program's plans ask)."""

    __slots__ = ("backend", "name", "precise_log", "timed", "_handle", "_profile_handle",
                 "_handle_arg", "_profile_arg", "_tensors", "_ia", "_oa", "_in_ref", "_out_ref", "_ni",
                 "_no", "_in", "_out", "_in_t", "_out_t", "_execute", "_args")

    def __init__(self, backend: Backend, spec: GraphSpec) -> None:
        self.backend, self.name = backend, spec.name
        # the live graph's handle (re-pointed when its context is re-created) and the QNN profile
        # to record into (None: not profiled), each with its pointer argument
        self._handle: C.c_void_p | None = None
        self._profile_handle: C.c_void_p | None = None
        self._handle_arg: object = None
        self._profile_arg: object = None
        self.precise_log = False  # a failure quotes only the lines this call logged (one lock more)
        self.timed = True         # read the clock around the C call
        self._tensors = [IOTensor(s) for s in spec.inputs] + [IOTensor(s) for s in spec.outputs]
        ni, no = len(spec.inputs), len(spec.outputs)
        self._ia = (T.Tensor * max(1, ni))()
        self._oa = (T.Tensor * max(1, no))()
        for i, t in enumerate(self._tensors[:ni]):
            self._ia[i] = t.struct
        for i, t in enumerate(self._tensors[ni:]):
            self._oa[i] = t.struct
        self._ni, self._no = ni, no   # passed as C ints: what uint32_t parameters receive
        self._in_t = [self._ia[i] for i in range(ni)]   # views into the arrays QNN reads
        self._out_t = [self._oa[j] for j in range(no)]
        self._in = [t.body.clientBuf for t in self._in_t]
        self._out = [t.body.clientBuf for t in self._out_t]
        self._in_ref, self._out_ref = C.byref(self._ia), C.byref(self._oa)
        self._execute = _untyped(backend.api.graphExecute)
        self._pack()

    def _pack(self) -> None:
        """graphExecute's arguments, as one tuple (the call passes it as it is)."""
        self._args = (self._handle_arg, self._in_ref, self._ni, self._out_ref, self._no,
                      self._profile_arg, None)

    @property
    def handle(self) -> C.c_void_p | None:
        """The live graph's handle the call goes to (a c_void_p, or None before it is pointed)."""
        return self._handle

    @handle.setter
    def handle(self, handle: C.c_void_p | None) -> None:
        self._handle, self._handle_arg = handle, pointer_arg(handle)
        self._pack()

    @property
    def profile_handle(self) -> C.c_void_p | None:
        """The QNN profile the call records into, None when it is not profiled."""
        return self._profile_handle

    @profile_handle.setter
    def profile_handle(self, handle: C.c_void_p | None) -> None:
        self._profile_handle, self._profile_arg = handle, pointer_arg(handle)
        self._pack()

    def set_input(self, i: int, arr: np.ndarray) -> None:
        """Input `i` reads `arr` (C-contiguous, the tensor's dtype and shape)."""
        self._in_t[i].body.memType = T.TENSORMEMTYPE_RAW
        cb = self._in[i]
        cb.data, cb.dataSize = arr.ctypes.data, arr.nbytes

    def set_input_mem(self, i: int, mem_handle: int) -> None:
        """Input `i` reads registered memory (a mem handle of the live graph's context)."""
        bind_mem_handle(self._in_t[i], mem_handle)

    def set_output_mem(self, j: int, mem_handle: int) -> None:
        bind_mem_handle(self._out_t[j], mem_handle)

    def point_input(self, i: int, arr: np.ndarray) -> None:
        """Like set_input, for an array of the size already set (the per-call rebind)."""
        self._in[i].data = arr.ctypes.data

    def set_input_size(self, i: int, nbytes: int) -> None:
        self._in[i].dataSize = nbytes

    def set_output(self, j: int, arr: np.ndarray) -> None:
        self._out_t[j].body.memType = T.TENSORMEMTYPE_RAW
        cb = self._out[j]
        cb.data, cb.dataSize = arr.ctypes.data, arr.nbytes

    def point_output(self, j: int, arr: np.ndarray) -> None:
        self._out[j].data = arr.ctypes.data

    def set_output_size(self, j: int, nbytes: int) -> None:
        self._out[j].dataSize = nbytes

    def attach_profile(self, profile: Profile) -> Callable[[], list[dict]]:
        """Record every call into `profile`; returns what reads a call's events."""
        self.profile_handle = profile.handle
        return profile.events

    def point_at(self, graph: LiveGraph) -> None:
        """Call `graph`'s handle from now on: a graph of this process."""
        if not isinstance(graph, LocalGraph):
            raise QnnrtError(f"graph {self.name!r}: a call in this process pointed at "
                             f"{type(graph).__name__}, a graph of another process")
        self.handle = graph.handle

    def __call__(self, values: list | None = None) -> float:
        """Execute on `handle`; returns the seconds spent inside QNN (0.0 when not timed).
        `values`, a call site's slot list, is not read: the structs point at the arrays already,
        so a binder with nothing to do but the call hands the call itself to its call site
        (`GraphBinding.entry`)."""
        mark = self.backend.log.mark() if self.precise_log else None
        timed = self.timed
        t0 = _clock() if timed else 0.0
        rc = self._execute(*self._args)
        seconds = _clock() - t0 if timed else 0.0
        if rc or DEFERRED.exc is not None:
            self.backend.check(rc, "graphExecute", mark, f"for graph {self.name!r}")
        return seconds


class LocalGraph:
    """A graph of this process (core.graph.Graph derives from it): its live handle and its context.
    What a `BoundCall` may be pointed at; a PD worker's graph is another kind of `LiveGraph`."""
    handle: C.c_void_p
    context: Context


class LiveGraph(Protocol):
    """A live graph, of this process (`Graph`) or of a PD worker (runtime/hosts/pd/remote.py): what a
    binder is pointed at, and what executes by name, checked (the reference path)."""
    @property
    def spec(self) -> GraphSpec: ...

    @property
    def last_execute_seconds(self) -> float: ...

    def execute(self, inputs: object, profile: Profile | None = None,
                dequantize: bool | Sequence[bool] = True,
                shared: SharedMemory | None = None) -> dict[str, np.ndarray]: ...


class PreparedCall(Protocol):
    """The calling shape of a prepared graph call: `BoundCall` in this process; a PD worker's
    remote call (runtime/hosts/pd/remote.py) has the same shape, so one binder serves both."""

    def point_at(self, graph: LiveGraph) -> None:
        """Call `graph` from now on (its context may have been re-created)."""

    def set_input(self, i: int, arr: np.ndarray) -> None: ...
    def point_input(self, i: int, arr: np.ndarray) -> None: ...
    def set_input_size(self, i: int, nbytes: int) -> None: ...
    def set_output(self, j: int, arr: np.ndarray) -> None: ...
    def point_output(self, j: int, arr: np.ndarray) -> None: ...
    def set_output_size(self, j: int, nbytes: int) -> None: ...
    def attach_profile(self, profile: Profile) -> Callable[[], list[dict]]: ...
    def __call__(self) -> float: ...
