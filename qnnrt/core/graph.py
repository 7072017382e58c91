"""`Graph`: a graph retrieved from a live context, for direct core users: its checked `execute`
validates and converts the inputs, then runs through the one binder (binding.py) over a
`BoundCall` (call.py), the same path every plan takes."""
from __future__ import annotations

import ctypes as C
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from qnnrt.core.binary import GraphSpec
from qnnrt.core.shared_buffer import SharedMemory
from qnnrt.core.tensor import TensorSpec, order_inputs, prepare_input
from qnnrt.errors import QnnrtError
from qnnrt.core.binding import GraphBinding
from qnnrt.core.call import BoundCall, LocalGraph

if TYPE_CHECKING:

    from qnnrt.core.context import Context
    from qnnrt.core.profile import Profile


class Graph(LocalGraph):
    """Executes one QNN graph with checks, for direct core users: inputs are validated and converted
    on every call, outputs are fresh arrays (a later execution never changes an earlier result)."""

    def __init__(self, context: Context, spec: GraphSpec, handle: C.c_void_p) -> None:
        self.context = context
        self.spec = spec
        self.name = spec.name
        self.handle = handle
        self._input_names = [s.name for s in spec.inputs]
        self._bindings: dict[tuple[tuple[bool, ...], SharedMemory | None], GraphBinding] = {}
        self._calls: dict[GraphBinding, BoundCall] = {}   # each binding's call (this process's)
        self._lock = threading.Lock()
        self._valid = True
        self.last_execute_seconds = 0.0  # time inside graphExecute of the last execution

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.spec.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.spec.outputs

    def invalidate(self) -> None:
        """The context is being freed: wait for a running execution, then refuse new ones."""
        with self._lock:
            self._valid = False
            self.handle = C.c_void_p()
            for b in self._bindings.values():
                b.release()   # shared staging buffers: deregistered while the context lives
            self._bindings.clear()
            self._calls.clear()

    def _binding(self, dequantize: bool | Sequence[bool], shared: SharedMemory | None
                 ) -> GraphBinding:
        no = len(self.spec.outputs)
        flags = (dequantize,) * no if isinstance(dequantize, bool) else tuple(dequantize)
        b = self._bindings.get((flags, shared))
        if b is None:
            ni = len(self.spec.inputs)
            call = BoundCall(self.context.backend, self.spec)
            call.precise_log = True
            b = GraphBinding(call, self.spec, range(ni), range(ni, ni + no), flags,
                             f"graph {self.name!r}", shared=shared)
            for i in range(ni):
                b.trust_input(i)   # execute prepares every input first
            self._bindings[(flags, shared)] = b
            self._calls[b] = call
        return b

    def execute(self, inputs: object, profile: Profile | None = None,
                dequantize: bool | Sequence[bool] = True,
                shared: SharedMemory | None = None) -> dict[str, np.ndarray]:
        """Run the graph. Fixed-point outputs are dequantized to float32 unless `dequantize` is
        False (then the raw integers are returned); a sequence decides per output, in order.
        With `shared`, the graph's I/O is in that rpcmem, registered with this context (inputs
        copied in, outputs copied out: results are still fresh arrays)."""
        where = f"graph {self.name!r}"
        values: list = [prepare_input(s, v, where) for s, v in
                        zip(self.spec.inputs, order_inputs(self._input_names, inputs, where))]
        values += [None] * len(self.spec.outputs)
        with self._lock:
            if not self._valid or self.context.closed:
                raise QnnrtError(f"{where}: its context {self.context.name!r} was freed; "
                                 f"retrieve the graph again from a live context")
            b = self._binding(dequantize, shared)
            b.point_at(self)
            self._calls[b].profile_handle = profile.handle if profile is not None else None
            self.last_execute_seconds = b.run(values)
        ni = len(self.spec.inputs)
        return {s.name: values[ni + j] for j, s in enumerate(self.spec.outputs)}

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.spec.inputs)} in, {len(self.spec.outputs)} out)"
