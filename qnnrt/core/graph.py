"""Graph: a graph retrieved from a live context; executes numpy in, numpy out."""
from __future__ import annotations

import ctypes as C
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from qnnrt._capi import types as T
from qnnrt._capi.log import interrupt_pending
from qnnrt.core.binary import GraphSpec
from qnnrt.core.tensor import IOTensor, order_inputs, prepare_input
from qnnrt.errors import QnnrtError

if TYPE_CHECKING:
    from qnnrt.core.context import Context
    from qnnrt.core.profile import Profile


class Graph:
    """Executes one QNN graph. Input/output Qnn_Tensor_t structs and output buffers are allocated
    once and reused; outputs are returned as fresh arrays, so a later execution never changes what
    an earlier one returned."""

    def __init__(self, context: Context, spec: GraphSpec, handle: C.c_void_p):
        self.context = context
        self.spec = spec
        self.name = spec.name
        self.handle = handle
        self._inputs = [IOTensor(s) for s in spec.inputs]
        self._outputs = [IOTensor(s) for s in spec.outputs]
        self._in_array = (T.Tensor * max(1, len(self._inputs)))()
        self._out_array = (T.Tensor * max(1, len(self._outputs)))()
        for i, t in enumerate(self._outputs):
            self._out_array[i] = t.struct
        self._input_names = [s.name for s in spec.inputs]
        self._execute = context.backend.api.graphExecute
        self._lock = threading.Lock()
        self._valid = True
        self.last_execute_seconds = 0.0  # time inside graphExecute of the last execution

    @property
    def inputs(self) -> tuple:
        return self.spec.inputs

    @property
    def outputs(self) -> tuple:
        return self.spec.outputs

    def invalidate(self) -> None:
        """The context is being freed: wait for a running execution, then refuse new ones."""
        with self._lock:
            self._valid = False
            self.handle = C.c_void_p()

    def execute(self, inputs, profile: Profile | None = None,
                dequantize: bool | Sequence[bool] = True) -> dict[str, np.ndarray]:
        """Run the graph. Fixed-point outputs are dequantized to float32 unless `dequantize` is
        False (then the raw integers are returned); a sequence decides per output, in order."""
        where = f"graph {self.name!r}"
        values = order_inputs(self._input_names, inputs, where)
        arrays = [prepare_input(s, v, where) for s, v in zip(self.spec.inputs, values)]
        return self.execute_prepared(arrays, profile, dequantize)

    def execute_prepared(self, arrays: Sequence[np.ndarray], profile: Profile | None = None,
                         dequantize: bool | Sequence[bool] = True) -> dict[str, np.ndarray]:
        """`execute` for callers that already validated: `arrays` in input order, each of the
        tensor's dtype and shape and C-contiguous (what `prepare_input` returns). No checks."""
        where = f"graph {self.name!r}"
        with self._lock:
            if not self._valid or self.context.closed:
                raise QnnrtError(f"{where}: its context {self.context.name!r} was freed; "
                                 f"retrieve the graph again from a live context")
            for i, (t, a) in enumerate(zip(self._inputs, arrays)):
                t.bind(a)  # zero copy: QNN reads the caller's (validated) array
                self._in_array[i] = t.struct
            backend = self.context.backend
            mark = backend.log.mark()
            t0 = time.perf_counter()
            rc = self._execute(self.handle, self._in_array, len(self._inputs), self._out_array,
                               len(self._outputs), profile.handle if profile else None, None)
            self.last_execute_seconds = time.perf_counter() - t0
            backend.check(rc, "graphExecute", mark, f"for graph {self.name!r}")
            flags = ([dequantize] * len(self._outputs) if isinstance(dequantize, bool)
                     else list(dequantize))
            out = {}
            for t, deq in zip(self._outputs, flags):
                s = t.spec
                out[s.name] = (s.dequantize(t.buffer) if deq and s.is_fixed_point
                               else t.buffer.copy())
            return out

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self._inputs)} in, {len(self._outputs)} out)"


class BoundCall:
    """One graph's execute call over I/O structs made once, for a runtime's prepared plan: the
    caller points each input and output at an array it already validated or planned, then calls.
    Nothing is checked here (`Graph.execute` is the checked path); a failed call raises QnnError
    with QNN's log, and an interrupt the log callback deferred is raised after the call returns."""

    __slots__ = ("backend", "name", "_tensors", "_ia", "_oa", "_ni", "_no", "_in", "_out", "_execute")

    def __init__(self, backend, spec: GraphSpec):
        self.backend, self.name = backend, spec.name
        self._tensors = [IOTensor(s) for s in spec.inputs] + [IOTensor(s) for s in spec.outputs]
        ni, no = len(spec.inputs), len(spec.outputs)
        self._ia = (T.Tensor * max(1, ni))()
        self._oa = (T.Tensor * max(1, no))()
        for i, t in enumerate(self._tensors[:ni]):
            self._ia[i] = t.struct
        for i, t in enumerate(self._tensors[ni:]):
            self._oa[i] = t.struct
        self._ni, self._no = C.c_uint32(ni), C.c_uint32(no)
        self._in = [self._ia[i].body.clientBuf for i in range(ni)]
        self._out = [self._oa[j].body.clientBuf for j in range(no)]
        self._execute = backend.api.graphExecute

    def set_input(self, i: int, arr: np.ndarray) -> None:
        """Input `i` reads `arr` (C-contiguous, the tensor's dtype and shape; kept alive by the caller)."""
        cb = self._in[i]
        cb.data, cb.dataSize = arr.ctypes.data, arr.nbytes

    def point_input(self, i: int, arr: np.ndarray) -> None:
        """Like set_input, for an array of the size already set (the per-call rebind)."""
        self._in[i].data = arr.ctypes.data

    def set_input_size(self, i: int, nbytes: int) -> None:
        self._in[i].dataSize = nbytes

    def set_output(self, j: int, arr: np.ndarray) -> None:
        cb = self._out[j]
        cb.data, cb.dataSize = arr.ctypes.data, arr.nbytes

    def point_output(self, j: int, arr: np.ndarray) -> None:
        self._out[j].data = arr.ctypes.data

    def set_output_size(self, j: int, nbytes: int) -> None:
        self._out[j].dataSize = nbytes

    def __call__(self, handle) -> float:
        """Execute on `handle` (the live graph's, `Graph.handle`); seconds spent inside QNN."""
        pc = time.perf_counter
        t0 = pc()
        rc = self._execute(handle, self._ia, self._ni, self._oa, self._no, None, None)
        dt = pc() - t0
        if rc or interrupt_pending():
            self.backend.check(rc, "graphExecute", None, f"for graph {self.name!r}")
        return dt
