"""Matrix products: mm, bmm, addmm, linear."""
from __future__ import annotations

import numpy as np

from qnnrt.errors import KernelError
from qnnrt.executorch.kernels.dtypes import _arr, astype, _is_bool, _is_int, _opmath, _scalar
from qnnrt.executorch.kernels.dtypes import Value
from qnnrt.executorch.kernels.registry import OutInfo, register_kernel


def _same_dtype(op: str, *xs: Value) -> np.dtype:
    dts = {x.dtype for x in xs}
    if len(dts) != 1:
        raise KernelError(f"{op}: expected all tensors to have the same dtype, got "
                          f"{', '.join(str(x.dtype) for x in xs)}")
    dt = xs[0].dtype
    if _is_bool(dt):
        raise KernelError(f"{op}: not implemented for 'Bool'")
    return dt


def _matmul(a: Value, b: Value, dt: np.dtype) -> np.ndarray:
    om = _opmath(dt)
    with np.errstate(all="ignore"):
        return astype(np.matmul(astype(a, om), astype(b, om)), dt)


@register_kernel("aten::mm.out", 3, cast="strict")
def mm_out(self: Value, mat2: Value, out: OutInfo | None = None) -> np.ndarray:
    a, b = _arr(self), _arr(mat2)
    if a.ndim != 2 or b.ndim != 2:
        raise KernelError(f"aten::mm.out: expected 2-d tensors, got {a.ndim}-d and {b.ndim}-d")
    if a.shape[1] != b.shape[0]:
        raise KernelError(f"aten::mm.out: mat1 and mat2 shapes cannot be multiplied "
                          f"({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
    return _matmul(a, b, _same_dtype("aten::mm.out", a, b))


@register_kernel("aten::bmm.out", 3, cast="strict")
def bmm_out(self: Value, mat2: Value, out: OutInfo | None = None) -> np.ndarray:
    a, b = _arr(self), _arr(mat2)
    if a.ndim != 3 or b.ndim != 3:
        raise KernelError(f"aten::bmm.out: expected 3-d tensors, got {a.ndim}-d and {b.ndim}-d")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise KernelError(f"aten::bmm.out: shapes {list(a.shape)} and {list(b.shape)} cannot be "
                          "batch-multiplied")
    return _matmul(a, b, _same_dtype("aten::bmm.out", a, b))


@register_kernel("aten::addmm.out", 6, cast="strict")
def addmm_out(self: Value, mat1: Value, mat2: Value, beta: Value = 1, alpha: Value = 1,
              out: OutInfo | None = None) -> np.ndarray:
    op = "aten::addmm.out"
    s, a, b = _arr(self), _arr(mat1), _arr(mat2)
    if a.ndim != 2 or b.ndim != 2:
        raise KernelError(f"{op}: mat1 and mat2 must be 2-d, got {a.ndim}-d and {b.ndim}-d")
    if a.shape[1] != b.shape[0]:
        raise KernelError(f"{op}: mat1 and mat2 shapes cannot be multiplied "
                          f"({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
    dt = _same_dtype(op, s, a, b)
    beta, alpha = _scalar(beta, "beta"), _scalar(alpha, "alpha")
    if _is_int(dt) and (isinstance(beta, float) or isinstance(alpha, float)):
        raise KernelError(f"{op}: for integral input tensors, beta and alpha must be integers")
    n, p = a.shape[0], b.shape[1]
    try:
        np.broadcast_to(s, (n, p))
    except ValueError:
        raise KernelError(f"{op}: self of shape {list(s.shape)} can't be broadcast to "
                          f"[{n}, {p}]") from None
    om = _opmath(dt)
    with np.errstate(all="ignore"):
        prod = np.matmul(astype(a, om), astype(b, om))
        if alpha != 1:
            prod = prod * np.asarray(alpha, dtype=om)
        if beta != 0:   # beta == 0: self is ignored (nan / inf in it do not propagate)
            sv = astype(s, om)
            prod = prod + (sv if beta == 1 else sv * np.asarray(beta, dtype=om))
    return astype(np.broadcast_to(prod, (n, p)), dt)


@register_kernel("aten::linear.out", 4, cast="strict")
def linear_out(input: Value, weight: Value, bias: Value = None, out: OutInfo | None = None) -> np.ndarray:
    op = "aten::linear.out"
    x, w = _arr(input), _arr(weight)
    if w.ndim not in (1, 2):
        raise KernelError(f"{op}: weight must be 1-d or 2-d, got {w.ndim}-d")
    if x.ndim == 0:
        raise KernelError(f"{op}: input must have at least one dimension")
    if x.shape[-1] != w.shape[-1]:
        raise KernelError(f"{op}: mat1 and mat2 shapes cannot be multiplied "
                          f"({int(np.prod(x.shape[:-1]))}x{x.shape[-1]} and "
                          f"{w.shape[-1]}x{w.shape[0] if w.ndim == 2 else 1})")
    bs = [] if bias is None else [_arr(bias)]
    dt = _same_dtype(op, x, w, *bs)
    om = _opmath(dt)
    with np.errstate(all="ignore"):
        r = np.matmul(astype(x, om), astype(w, om).T)
        if bs:
            r = r + astype(bs[0], om)
    return astype(np.asarray(r), dt)
