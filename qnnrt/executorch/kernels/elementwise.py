"""Elementwise arithmetic: add / sub / mul / div (Tensor and Scalar overloads)."""
from __future__ import annotations

import numpy as np

from qnnrt.errors import KernelError
from qnnrt.executorch.kernels.dtypes import (
    _arr,
    astype,
    _F32,
    _I64,
    _is_bool,
    _is_float,
    _is_int,
    _opmath,
    _scalar,
    _to_operand,
    result_type,
)
from qnnrt.executorch.kernels.dtypes import Value
from qnnrt.executorch.kernels.registry import OutInfo, register_kernel


def _scalar_as(value: Value, dtype: np.dtype) -> np.ndarray:
    """A Python scalar in `dtype`; integers out of range wrap around, as PyTorch does."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and \
            np.dtype(dtype).kind in "iu":
        with np.errstate(over="ignore"):
            return np.asarray(int(value) % (1 << (8 * np.dtype(dtype).itemsize))).astype(dtype)
    return np.asarray(value, dtype=dtype)


def _binary_prep(op: str, a: Value, b: Value) -> tuple[np.dtype, np.dtype, np.ndarray, np.ndarray]:
    """(common dtype, opmath dtype, a and b as opmath arrays), shapes checked to broadcast."""
    a, b = _to_operand(a), _to_operand(b)
    common = result_type(a, b)
    om = _opmath(common)
    av = astype(np.asarray(a), om) if isinstance(a, np.ndarray) else a
    bv = astype(np.asarray(b), om) if isinstance(b, np.ndarray) else b
    if not isinstance(av, np.ndarray):
        av = _scalar_as(av, om)
    if not isinstance(bv, np.ndarray):
        bv = _scalar_as(bv, om)
    try:
        np.broadcast_shapes(av.shape, bv.shape)
    except ValueError:
        raise KernelError(f"{op}: shapes {list(np.shape(a))} and {list(np.shape(b))} are not "
                          "broadcastable") from None
    return common, om, av, bv


def _check_alpha(op: str, common: np.dtype, alpha: Value) -> None:
    if _is_int(common) and isinstance(alpha, float):
        raise KernelError(f"{op}: for integral input tensors, argument alpha must not be a floating "
                          "point number")
    if _is_bool(common) and not isinstance(alpha, (bool, np.bool_)):
        if isinstance(alpha, float) or (isinstance(alpha, int) and alpha not in (0, 1)):
            raise KernelError(f"{op}: boolean alpha only supported for Tensor arguments with "
                              "boolean dtype")


def _add(op: str, a: Value, b: Value, alpha: Value, sign: Value) -> np.ndarray:
    common, om, av, bv = _binary_prep(op, a, b)
    alpha = _scalar(alpha, "alpha")
    if sign < 0 and (_is_bool(np.asarray(a).dtype) or _is_bool(np.asarray(b).dtype)):
        raise KernelError(f"{op}: subtraction, the `-` operator, with a bool tensor is not supported; "
                          "use logical_xor / logical_not")
    _check_alpha(op, common, alpha)
    with np.errstate(all="ignore"):
        if _is_bool(common):
            r = av | (bv & bool(alpha)) if sign > 0 else av
        elif alpha == 1:
            r = av + bv if sign > 0 else av - bv
        else:
            al = np.asarray(alpha, dtype=om)
            r = av + al * bv if sign > 0 else av - al * bv
    return astype(np.asarray(r), common)


@register_kernel("aten::add.out", 4)
def add_out(self: Value, other: Value, alpha: Value = 1, out: OutInfo | None = None) -> np.ndarray:
    return _add("aten::add.out", _arr(self), _arr(other), alpha, +1)


@register_kernel("aten::add.Scalar_out", 4)
def add_scalar_out(self: Value, other: Value, alpha: Value = 1, out: OutInfo | None = None) -> np.ndarray:
    return _add("aten::add.Scalar_out", _arr(self), _scalar(other, "other"), alpha, +1)


@register_kernel("aten::sub.out", 4)
def sub_out(self: Value, other: Value, alpha: Value = 1, out: OutInfo | None = None) -> np.ndarray:
    return _add("aten::sub.out", _arr(self), _arr(other), alpha, -1)


@register_kernel("aten::sub.Scalar_out", 4)
def sub_scalar_out(self: Value, other: Value, alpha: Value = 1, out: OutInfo | None = None) -> np.ndarray:
    return _add("aten::sub.Scalar_out", _arr(self), _scalar(other, "other"), alpha, -1)


def _mul(op: str, a: Value, b: Value) -> np.ndarray:
    common, om, av, bv = _binary_prep(op, a, b)
    with np.errstate(all="ignore"):
        r = (av & bv) if _is_bool(common) else av * bv
    return astype(np.asarray(r), common)


@register_kernel("aten::mul.out", 3)
def mul_out(self: Value, other: Value, out: OutInfo | None = None) -> np.ndarray:
    return _mul("aten::mul.out", _arr(self), _arr(other))


@register_kernel("aten::mul.Scalar_out", 3)
def mul_scalar_out(self: Value, other: Value, out: OutInfo | None = None) -> np.ndarray:
    return _mul("aten::mul.Scalar_out", _arr(self), _scalar(other, "other"))


def _div(op: str, a: Value, b: Value, mode: Value) -> np.ndarray:
    if mode is not None and mode not in ("trunc", "floor"):
        raise KernelError(f"{op}: div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                          f"but found {mode!r}")
    a, b = _to_operand(a), _to_operand(b)
    common = result_type(a, b)
    if mode is None:
        # true division: integer / bool inputs give the default float type
        rt = common if _is_float(common) else _F32
        om = _opmath(rt)
        av = astype(np.asarray(a), om)
        bv = astype(np.asarray(b), om)
        with np.errstate(all="ignore"):
            r = av / bv
        return astype(np.asarray(r), rt)
    if _is_bool(common):
        common = _I64 if mode else common
    om = _opmath(common)
    av = astype(np.asarray(a), om)
    bv = astype(np.asarray(b), om)
    if _is_int(common):
        if np.any(bv == 0):
            raise KernelError(f"{op}: ZeroDivisionError (integer division by zero)")
        q = np.floor_divide(av, bv)
        if mode == "trunc":
            rem = av - q * bv
            q = q + ((rem != 0) & ((av < 0) != (bv < 0)))
        return astype(np.asarray(q), common)
    with np.errstate(all="ignore"):
        if mode == "trunc":
            r = np.trunc(av / bv)
        else:
            r = np.floor_divide(av, bv)
            zero = bv == 0
            if np.any(zero):
                r = np.where(zero, av / bv, r)
    return astype(np.asarray(r), common)


@register_kernel("aten::div.out", 3)
def div_out(self: Value, other: Value, out: OutInfo | None = None) -> np.ndarray:
    return _div("aten::div.out", _arr(self), _arr(other), None)


@register_kernel("aten::div.out_mode", 4)
def div_out_mode(self: Value, other: Value, rounding_mode: Value = None, out: OutInfo | None = None) -> np.ndarray:
    return _div("aten::div.out_mode", _arr(self), _arr(other), rounding_mode)


@register_kernel("aten::div.Scalar_out", 3)
def div_scalar_out(self: Value, other: Value, out: OutInfo | None = None) -> np.ndarray:
    return _div("aten::div.Scalar_out", _arr(self), _scalar(other, "other"), None)


@register_kernel("aten::div.Scalar_mode_out", 4)
def div_scalar_mode_out(self: Value, other: Value, rounding_mode: Value = None,
                        out: OutInfo | None = None) -> np.ndarray:
    return _div("aten::div.Scalar_mode_out", _arr(self), _scalar(other, "other"), rounding_mode)
