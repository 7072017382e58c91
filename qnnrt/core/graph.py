"""Graph: a graph retrieved from a live context; executes numpy in, numpy out."""
from __future__ import annotations

import ctypes as C
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from qnnrt._capi import types as T
from qnnrt.core.binary import GraphSpec
from qnnrt.core.tensor import IOTensor, prepare_input
from qnnrt.errors import InputError, QnnrtError

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

    def _ordered(self, inputs) -> list:
        where = f"graph {self.name!r}"
        if isinstance(inputs, Mapping):
            unknown = [k for k in inputs if k not in self._input_names]
            missing = [k for k in self._input_names if k not in inputs]
            if unknown or missing:
                raise InputError(f"{where}: " + "; ".join(
                    ([f"unknown input(s) {unknown}"] if unknown else [])
                    + ([f"missing input(s) {missing}"] if missing else []))
                    + f". Expected inputs: {self._input_names}")
            return [inputs[k] for k in self._input_names]
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if not isinstance(inputs, Sequence):
            raise InputError(f"{where}: inputs must be a dict by name or a sequence of arrays")
        if len(inputs) != len(self._input_names):
            raise InputError(f"{where}: got {len(inputs)} input(s), expected "
                             f"{len(self._input_names)} ({self._input_names})")
        return list(inputs)

    def execute(self, inputs, profile: Profile | None = None,
                dequantize: bool | Sequence[bool] = True) -> dict[str, np.ndarray]:
        """Run the graph. Fixed-point outputs are dequantized to float32 unless `dequantize` is
        False (then the raw integers are returned); a sequence decides per output, in order."""
        values = self._ordered(inputs)
        where = f"graph {self.name!r}"
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
            rc = self._execute(self.handle, self._in_array, len(self._inputs), self._out_array,
                               len(self._outputs), profile.handle if profile else None, None)
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
