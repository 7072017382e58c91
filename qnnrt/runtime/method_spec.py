"""A method as data: its inputs and outputs (`IOSpec`), its steps by tensor name (`QnnStep`, a graph
call; `CpuStep`, an ONNX Runtime segment) and the one validation of a caller's inputs. Below the
methods (method.py) and their plans (plan.py), which both read it."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Sequence, Union

import numpy as np

from qnnrt.core.tensor import TensorSpec, order_inputs, prepare_input
from qnnrt.errors import QnnrtError
from qnnrt.runtime.cpu_segment import CpuSegment


@dataclass(frozen=True)
class IOSpec:
    """A method input or output: name, shape (None for a free dimension) and numpy dtype."""
    name: str
    shape: tuple
    dtype: np.dtype
    tensor: TensorSpec | None = None  # the QNN tensor behind it, for fixed-point quantization

    @property
    def is_fixed_point(self) -> bool:
        return self.tensor is not None and self.tensor.is_fixed_point

    def quantize(self, x: np.ndarray) -> np.ndarray:
        if self.tensor is None:
            raise QnnrtError(f"{self.name}: no QNN tensor behind this {self.dtype} I/O to quantize with")
        return self.tensor.quantize(x)

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": str(self.dtype)}


@dataclass
class QnnStep:
    key: str                 # context key in the program's pool
    graph: str               # graph name inside that context binary
    inputs: list[str]        # tensor names, in the graph's input order
    outputs: list[str]       # tensor names, in the graph's output order
    dequantize: "bool | tuple[bool, ...]" = True  # fixed-point outputs -> float32, per output


@dataclass
class CpuStep:
    segment: CpuSegment


# a function that executes graph `step.graph` of context `step.key` (the program wires residency in)
GraphRunner = Callable[[QnnStep, int, list[np.ndarray]], list[np.ndarray]]
# a method's inputs: a dict by name, a sequence in order, or one array (core.tensor.order_inputs)
Inputs = Union[Mapping[str, object], Sequence[object], np.ndarray]


def validate_inputs(specs: Sequence[IOSpec], inputs: Inputs, where: str) -> dict[str, np.ndarray]:
    """Inputs by name (mapping) or in order (sequence) -> validated arrays by name."""
    values = order_inputs([s.name for s in specs], inputs, where)
    return {s.name: prepare_input(s, v, where) for s, v in zip(specs, values)}
