"""Copies: clone and _to_copy.

The out dtype may differ: results are copied into it, as Tensor.copy_.
"""
from __future__ import annotations

import numpy as np

from qnnrt.executorch.kernels.dtypes import _arr, astype
from qnnrt.executorch.kernels.dtypes import Value
from qnnrt.executorch.kernels.registry import OutInfo, register_kernel


@register_kernel("aten::clone.out", 3, cast="any")
def clone_out(self: Value, memory_format: Value = None, out: OutInfo | None = None) -> np.ndarray:
    return np.array(_arr(self), copy=True)


@register_kernel("aten::_to_copy.out", 4, cast="any")
def to_copy_out(self: Value, non_blocking: Value = False, memory_format: Value = None,
                out: OutInfo | None = None) -> np.ndarray:
    x = _arr(self)
    if out is None or out.dtype is None:
        return np.array(x, copy=True)
    return np.array(astype(x, out.dtype), copy=True)
