"""A .pte delegate as the plans see it: which QNN graph call it is and where its arguments go
(`DelegateSite`), and the size-1 reshape ExecuTorch accepts on a delegate input. Below the method
adapter (program.py) and the plans (lowering.py, plan.py), which both read it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qnnrt.runtime.method_spec import QnnStep


@dataclass(frozen=True)
class DelegateSite:
    """How a .pte delegate maps onto its QNN graph: the graph call, and for each DelegateCall
    input / output (in arg order) its position among the graph's inputs / outputs."""
    step: QnnStep
    input_positions: tuple[int, ...]
    output_positions: tuple[int, ...]
    input_shapes: tuple[tuple[int, ...], ...]   # the graph's input shapes, in arg order


def size1_reshape(x: np.ndarray, want: tuple) -> np.ndarray:
    """`x` reshaped to `want` when the shapes differ only by size-1 dimensions (what ExecuTorch
    accepts, e.g. a 0-d CPU reduction result feeding a [1] graph input); else `x` unchanged, for
    the graph's own check to reject."""
    if (None not in want and x.size == int(np.prod(want, dtype=np.int64))
            and [d for d in x.shape if d != 1] == [d for d in want if d != 1]):
        return x.reshape(want)
    return x
