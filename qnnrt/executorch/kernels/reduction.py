"""Reductions: sum and mean (dim lists, keepdim, dtype)."""
from __future__ import annotations

import numpy as np

from qnnrt.errors import KernelError
from qnnrt.executorch.kernels.dtypes import (
    _arr,
    astype,
    _I64,
    _is_bool,
    _is_float,
    _is_int,
    _opmath,
    _scalar_type,
    _wrap_dim,
)
from qnnrt.executorch.kernels.dtypes import Value
from qnnrt.executorch.kernels.registry import OutInfo, register_kernel


def _reduce_dims(op: str, x: Value, dim: Value) -> tuple[int, ...] | None:
    if dim is None:
        return None
    dims = [dim] if isinstance(dim, (int, np.integer)) else list(dim)
    if not dims:
        return None
    w = [_wrap_dim(int(d), x.ndim, op) for d in dims]
    if len(set(w)) != len(w):
        raise KernelError(f"{op}: dim {w} appears multiple times in the list of dims")
    if x.ndim == 0:
        return None
    return tuple(w)


def _reduce(op: str, x: Value, dim: Value, keepdim: Value, dtype: Value, out: OutInfo | None,
            mean: bool) -> np.ndarray:
    x = _arr(x)
    dims = _reduce_dims(op, x, dim)
    if dtype is not None:
        rdt = _scalar_type(dtype, "dtype", op)
    elif out is not None and out.dtype is not None:
        rdt = np.dtype(out.dtype)
    elif mean:
        rdt = x.dtype
    else:
        rdt = _I64 if (_is_int(x.dtype) or _is_bool(x.dtype)) else x.dtype
    if mean and not _is_float(rdt):
        raise KernelError(f"{op}: could not infer output dtype. Input dtype must be either a floating "
                          f"point or complex dtype. Got: {x.dtype}")
    if out is not None and out.dtype is not None and dtype is not None and \
            np.dtype(out.dtype) != rdt:
        raise KernelError(f"{op}: expected out tensor to have dtype {rdt}, but got {out.dtype}")
    om = _opmath(rdt)
    xv = astype(x, om)
    with np.errstate(all="ignore"):
        if mean:
            r = np.mean(xv, axis=dims, keepdims=bool(keepdim), dtype=om)
        else:
            r = np.sum(xv, axis=dims, keepdims=bool(keepdim), dtype=om)
    if x.ndim == 0 and keepdim:
        r = np.reshape(r, ())
    return astype(np.asarray(r), rdt)


@register_kernel("aten::sum.IntList_out", 5)
def sum_intlist_out(self: Value, dim: Value = None, keepdim: Value = False, dtype: Value = None,
                    out: OutInfo | None = None) -> np.ndarray:
    return _reduce("aten::sum.IntList_out", self, dim, keepdim, dtype, out, mean=False)


@register_kernel("aten::sum.out", 3)
def sum_full_out(self: Value, dtype: Value = None, out: OutInfo | None = None) -> np.ndarray:
    return _reduce("aten::sum.out", self, None, False, dtype, out, mean=False)


@register_kernel("aten::mean.out", 5)
def mean_out(self: Value, dim: Value = None, keepdim: Value = False, dtype: Value = None,
             out: OutInfo | None = None) -> np.ndarray:
    return _reduce("aten::mean.out", self, dim, keepdim, dtype, out, mean=True)


@register_kernel("aten::mean.dtype_out", 3)
def mean_dtype_out(self: Value, dtype: Value = None, out: OutInfo | None = None) -> np.ndarray:
    return _reduce("aten::mean.dtype_out", self, None, False, dtype, out, mean=True)
