"""numpy CPU kernels for the operators ExecuTorch leaves outside delegates, keyed by operator name.

Keys are ExecuTorch's qualified names (``Operator.name`` + "." + ``Operator.overload``), e.g.
``aten::mm.out``. Each kernel follows the operator's schema (PyTorch ``native_functions.yaml`` /
ExecuTorch ``quantized.yaml``): a KernelCall's ``args`` are every schema argument in order (defaults
filled in by the emitter), the out tensor(s) last, then the returned value(s) (the same value index as
``out`` for these ops).

Semantics follow PyTorch's eager CPU operators:

* type promotion: categories bool < integer < floating; among operands of equal priority the larger
  type wins; dimensioned tensors outrank zero-dim tensors, which outrank Python scalars (Int /
  Double / Bool values), and a lower-priority operand only changes the result when it is of a higher
  category (a float scalar then yields the default float type, float32). ``float16 + int64 -> float16``.
* reduced-precision floats (float16 / bfloat16) are computed in float32 and rounded once (PyTorch's
  "opmath"); the result is rounded to the common dtype and then cast to the out tensor's dtype, which
  must be a legal cast (no float -> integer, no non-bool -> bool) unless the op is a copy.
* broadcasting as numpy (= PyTorch); alpha / beta scalars; ``div`` rounding modes; reductions with
  ``dim`` None or [] meaning all dimensions; out shapes computed from the inputs.

``KERNELS`` maps names to :class:`KernelDef`; :func:`missing_operators` lists names without a kernel.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from qnnrt.errors import KernelError

__all__ = [
    "KERNELS",
    "KernelDef",
    "KernelError",
    "OutInfo",
    "can_cast",
    "cast_to_out",
    "get_kernel",
    "missing_operators",
    "promote_types",
    "register_kernel",
    "result_type",
    "run_kernel",
    "supported_operators",
]


@dataclass(frozen=True)
class OutInfo:
    """What a kernel knows about its out tensor: dtype and (static / upper-bound) shape."""
    dtype: np.dtype
    shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class KernelDef:
    name: str
    fn: Callable[..., Any]
    n_args: int          # schema arguments, out tensors included
    n_out: int = 1       # trailing out tensor arguments
    cast: str = "same_kind"   # how the result may be cast to the out dtype: strict | same_kind | any

    @property
    def n_inputs(self) -> int:
        return self.n_args - self.n_out


KERNELS: dict[str, KernelDef] = {}


def register_kernel(name: str, n_args: int, n_out: int = 1, cast: str = "same_kind"):
    """Decorator: register ``fn(*inputs, out=OutInfo|None) -> np.ndarray`` under ``name``."""
    def deco(fn):
        KERNELS[name] = KernelDef(name, fn, n_args, n_out, cast)
        return fn
    return deco


def get_kernel(name: str) -> KernelDef:
    try:
        return KERNELS[name]
    except KeyError:
        raise KernelError(f"no CPU kernel for operator {name!r}; qnnrt implements: "
                          f"{', '.join(sorted(KERNELS))}") from None


def supported_operators() -> list[str]:
    return sorted(KERNELS)


def missing_operators(names: Iterable[str]) -> list[str]:
    """The names (unique, first-seen order) that have no registered kernel."""
    out: dict[str, None] = {}
    for n in names:
        if n not in KERNELS:
            out.setdefault(n, None)
    return list(out)


# ---------------------------------------------------------------------------------------------
# dtypes and promotion
# ---------------------------------------------------------------------------------------------
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)
try:
    import ml_dtypes as _mld
    _BF16 = np.dtype(_mld.bfloat16)
    _EXTRA_FLOATS = {_BF16, np.dtype(_mld.float8_e5m2), np.dtype(_mld.float8_e4m3fn),
                     np.dtype(_mld.float8_e5m2fnuz), np.dtype(_mld.float8_e4m3fnuz)}
except Exception:  # pragma: no cover
    _BF16 = None
    _EXTRA_FLOATS = set()
_REDUCED = {_F16} | _EXTRA_FLOATS


def _is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt in _EXTRA_FLOATS


def _is_bool(dt: np.dtype) -> bool:
    return dt == _BOOL


def _is_int(dt: np.dtype) -> bool:
    return dt.kind in "iu"


def _category(dt: np.dtype) -> int:
    return 0 if _is_bool(dt) else (2 if _is_float(dt) else 1)


def promote_types(a, b) -> np.dtype:
    """PyTorch's ``torch.promote_types`` for real dtypes."""
    if a is None:
        return None if b is None else np.dtype(b)
    if b is None:
        return np.dtype(a)
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return a
    if _is_bool(a):
        return b
    if _is_bool(b):
        return a
    fa, fb = _is_float(a), _is_float(b)
    if fa and fb:
        if a in _EXTRA_FLOATS or b in _EXTRA_FLOATS:
            # bfloat16 / float8 with another float: the wider of the two, float32 at least when
            # neither can represent the other (float16 vs bfloat16).
            if a.itemsize != b.itemsize:
                return a if a.itemsize > b.itemsize else b
            return _F32
        return np.promote_types(a, b)
    if fa:
        return a
    if fb:
        return b
    return np.promote_types(a, b)


def _operand_dtype(x) -> tuple[int, np.dtype]:
    """(priority, dtype): 2 dimensioned tensor, 1 zero-dim tensor, 0 Python scalar."""
    if isinstance(x, np.ndarray):
        return (2 if x.ndim > 0 else 1), x.dtype
    if isinstance(x, (bool, np.bool_)):
        return 0, _BOOL
    if isinstance(x, (int, np.integer)):
        return 0, _I64
    if isinstance(x, (float, np.floating)):
        return 0, _F32        # the default dtype, as PyTorch's wrapped numbers
    if isinstance(x, np.generic):
        return 1, x.dtype
    raise KernelError(f"unsupported operand {type(x).__name__}")


def _combine(higher, lower):
    if higher is None:
        return lower
    if lower is None:
        return higher
    if _is_float(higher):
        return higher
    if _is_bool(higher) or _is_float(lower):
        return promote_types(higher, lower)
    return higher


def result_type(*operands) -> np.dtype:
    """PyTorch's ``torch.result_type`` over tensors (numpy arrays) and Python scalars."""
    slots: list = [None, None, None]   # scalars, zero-dim, dimensioned
    for x in operands:
        pr, dt = _operand_dtype(x)
        slots[pr] = promote_types(slots[pr], dt)
    return _combine(slots[2], _combine(slots[1], slots[0]))


def can_cast(frm, to) -> bool:
    """PyTorch's ``torch.can_cast``: no float -> integer/bool, no integer -> bool."""
    frm, to = np.dtype(frm), np.dtype(to)
    if _is_float(frm) and not _is_float(to):
        return False
    if not _is_bool(frm) and _is_bool(to):
        return False
    return True


def _opmath(dt: np.dtype) -> np.dtype:
    return _F32 if dt in _REDUCED else dt


def cast_to_out(result: np.ndarray, out: OutInfo | None, op: str, mode: str = "same_kind"
                ) -> np.ndarray:
    """Cast a computed result to the out tensor's dtype under the operator's casting rule."""
    result = np.asarray(result)
    if out is None or out.dtype is None or result.dtype == out.dtype:
        return result
    if mode == "strict":
        raise KernelError(f"{op}: the out tensor is {out.dtype} but the result is {result.dtype}; "
                          "this operator needs them equal")
    if mode == "same_kind" and not can_cast(result.dtype, out.dtype):
        raise KernelError(f"{op}: result type {result.dtype} can't be cast to the desired output "
                          f"type {out.dtype}")
    return _astype(result, out.dtype)


def _astype(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    dt = np.dtype(dt)
    if x.dtype == dt:
        return x
    if _is_bool(dt):
        return x != 0
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(dt)


def _arr(x) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise KernelError(f"expected a tensor, got {type(x).__name__}")
    return x


def _scalar(x, what: str):
    if isinstance(x, np.ndarray):
        if x.size != 1:
            raise KernelError(f"{what} must be a scalar, got a tensor of shape {x.shape}")
        return x.reshape(()).item()
    if isinstance(x, (bool, int, float, np.generic)):
        return x.item() if isinstance(x, np.generic) else x
    raise KernelError(f"{what} must be a number, got {type(x).__name__}")


def _wrap_dim(d: int, ndim: int, op: str) -> int:
    n = max(ndim, 1)
    if not -n <= d < n:
        raise KernelError(f"{op}: dimension {d} out of range for a {ndim}-d tensor "
                          f"(expected to be in range of [{-n}, {n - 1}])")
    return d % n


def _scalar_type(code, what: str, op: str) -> np.dtype:
    from qnnrt.executorch.reader import (
        scalar_type_to_numpy,  # late import: formats -> runtime is fine
    )
    dt = scalar_type_to_numpy(int(code))
    if dt is None:
        raise KernelError(f"{op}: {what} ScalarType {code} is not supported by qnnrt's CPU kernels")
    return dt


def _to_operand(x):
    """Python scalars stay scalars; numpy generics become 0-d arrays."""
    if isinstance(x, np.generic):
        return np.asarray(x)
    return x


# ---------------------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------------------

def _scalar_as(value, dtype: np.dtype) -> np.ndarray:
    """A Python scalar in `dtype`; integers out of range wrap around, as PyTorch does."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and \
            np.dtype(dtype).kind in "iu":
        with np.errstate(over="ignore"):
            return np.asarray(int(value) % (1 << (8 * np.dtype(dtype).itemsize))).astype(dtype)
    return np.asarray(value, dtype=dtype)


def _binary_prep(op: str, a, b):
    a, b = _to_operand(a), _to_operand(b)
    common = result_type(a, b)
    om = _opmath(common)
    av = _astype(np.asarray(a), om) if isinstance(a, np.ndarray) else a
    bv = _astype(np.asarray(b), om) if isinstance(b, np.ndarray) else b
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


def _check_alpha(op: str, common: np.dtype, alpha) -> None:
    if _is_int(common) and isinstance(alpha, float):
        raise KernelError(f"{op}: for integral input tensors, argument alpha must not be a floating "
                          "point number")
    if _is_bool(common) and not isinstance(alpha, (bool, np.bool_)):
        if isinstance(alpha, float) or (isinstance(alpha, int) and alpha not in (0, 1)):
            raise KernelError(f"{op}: boolean alpha only supported for Tensor arguments with "
                              "boolean dtype")


def _add(op, a, b, alpha, sign):
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
    return _astype(np.asarray(r), common)


@register_kernel("aten::add.out", 4)
def add_out(self, other, alpha=1, out=None):
    return _add("aten::add.out", _arr(self), _arr(other), alpha, +1)


@register_kernel("aten::add.Scalar_out", 4)
def add_scalar_out(self, other, alpha=1, out=None):
    return _add("aten::add.Scalar_out", _arr(self), _scalar(other, "other"), alpha, +1)


@register_kernel("aten::sub.out", 4)
def sub_out(self, other, alpha=1, out=None):
    return _add("aten::sub.out", _arr(self), _arr(other), alpha, -1)


@register_kernel("aten::sub.Scalar_out", 4)
def sub_scalar_out(self, other, alpha=1, out=None):
    return _add("aten::sub.Scalar_out", _arr(self), _scalar(other, "other"), alpha, -1)


def _mul(op, a, b):
    common, om, av, bv = _binary_prep(op, a, b)
    with np.errstate(all="ignore"):
        r = (av & bv) if _is_bool(common) else av * bv
    return _astype(np.asarray(r), common)


@register_kernel("aten::mul.out", 3)
def mul_out(self, other, out=None):
    return _mul("aten::mul.out", _arr(self), _arr(other))


@register_kernel("aten::mul.Scalar_out", 3)
def mul_scalar_out(self, other, out=None):
    return _mul("aten::mul.Scalar_out", _arr(self), _scalar(other, "other"))


def _div(op, a, b, mode):
    if mode is not None and mode not in ("trunc", "floor"):
        raise KernelError(f"{op}: div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                          f"but found {mode!r}")
    a, b = _to_operand(a), _to_operand(b)
    common = result_type(a, b)
    if mode is None:
        # true division: integer / bool inputs give the default float type
        rt = common if _is_float(common) else _F32
        om = _opmath(rt)
        av = _astype(np.asarray(a), om)
        bv = _astype(np.asarray(b), om)
        with np.errstate(all="ignore"):
            r = av / bv
        return _astype(np.asarray(r), rt)
    if _is_bool(common):
        common = _I64 if mode else common
    om = _opmath(common)
    av = _astype(np.asarray(a), om)
    bv = _astype(np.asarray(b), om)
    if _is_int(common):
        if np.any(bv == 0):
            raise KernelError(f"{op}: ZeroDivisionError (integer division by zero)")
        q = np.floor_divide(av, bv)
        if mode == "trunc":
            rem = av - q * bv
            q = q + ((rem != 0) & ((av < 0) != (bv < 0)))
        return _astype(np.asarray(q), common)
    with np.errstate(all="ignore"):
        if mode == "trunc":
            r = np.trunc(av / bv)
        else:
            r = np.floor_divide(av, bv)
            zero = bv == 0
            if np.any(zero):
                r = np.where(zero, av / bv, r)
    return _astype(np.asarray(r), common)


@register_kernel("aten::div.out", 3)
def div_out(self, other, out=None):
    return _div("aten::div.out", _arr(self), _arr(other), None)


@register_kernel("aten::div.out_mode", 4)
def div_out_mode(self, other, rounding_mode=None, out=None):
    return _div("aten::div.out_mode", _arr(self), _arr(other), rounding_mode)


@register_kernel("aten::div.Scalar_out", 3)
def div_scalar_out(self, other, out=None):
    return _div("aten::div.Scalar_out", _arr(self), _scalar(other, "other"), None)


@register_kernel("aten::div.Scalar_mode_out", 4)
def div_scalar_mode_out(self, other, rounding_mode=None, out=None):
    return _div("aten::div.Scalar_mode_out", _arr(self), _scalar(other, "other"), rounding_mode)


# ---------------------------------------------------------------------------------------------
# matrix products
# ---------------------------------------------------------------------------------------------

def _same_dtype(op, *xs):
    dts = {x.dtype for x in xs}
    if len(dts) != 1:
        raise KernelError(f"{op}: expected all tensors to have the same dtype, got "
                          f"{', '.join(str(x.dtype) for x in xs)}")
    dt = xs[0].dtype
    if _is_bool(dt):
        raise KernelError(f"{op}: not implemented for 'Bool'")
    return dt


def _matmul(a, b, dt):
    om = _opmath(dt)
    with np.errstate(all="ignore"):
        return _astype(np.matmul(_astype(a, om), _astype(b, om)), dt)


@register_kernel("aten::mm.out", 3, cast="strict")
def mm_out(self, mat2, out=None):
    a, b = _arr(self), _arr(mat2)
    if a.ndim != 2 or b.ndim != 2:
        raise KernelError(f"aten::mm.out: expected 2-d tensors, got {a.ndim}-d and {b.ndim}-d")
    if a.shape[1] != b.shape[0]:
        raise KernelError(f"aten::mm.out: mat1 and mat2 shapes cannot be multiplied "
                          f"({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
    return _matmul(a, b, _same_dtype("aten::mm.out", a, b))


@register_kernel("aten::bmm.out", 3, cast="strict")
def bmm_out(self, mat2, out=None):
    a, b = _arr(self), _arr(mat2)
    if a.ndim != 3 or b.ndim != 3:
        raise KernelError(f"aten::bmm.out: expected 3-d tensors, got {a.ndim}-d and {b.ndim}-d")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise KernelError(f"aten::bmm.out: shapes {list(a.shape)} and {list(b.shape)} cannot be "
                          "batch-multiplied")
    return _matmul(a, b, _same_dtype("aten::bmm.out", a, b))


@register_kernel("aten::addmm.out", 6, cast="strict")
def addmm_out(self, mat1, mat2, beta=1, alpha=1, out=None):
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
        prod = np.matmul(_astype(a, om), _astype(b, om))
        if alpha != 1:
            prod = prod * np.asarray(alpha, dtype=om)
        if beta != 0:   # beta == 0: self is ignored (nan / inf in it do not propagate)
            sv = _astype(s, om)
            prod = prod + (sv if beta == 1 else sv * np.asarray(beta, dtype=om))
    return _astype(np.broadcast_to(prod, (n, p)), dt)


@register_kernel("aten::linear.out", 4, cast="strict")
def linear_out(input, weight, bias=None, out=None):
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
        r = np.matmul(_astype(x, om), _astype(w, om).T)
        if bs:
            r = r + _astype(bs[0], om)
    return _astype(np.asarray(r), dt)


# ---------------------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------------------

def _reduce_dims(op, x, dim) -> tuple[int, ...] | None:
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


def _reduce(op, x, dim, keepdim, dtype, out, mean):
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
    xv = _astype(x, om)
    with np.errstate(all="ignore"):
        if mean:
            r = np.mean(xv, axis=dims, keepdims=bool(keepdim), dtype=om)
        else:
            r = np.sum(xv, axis=dims, keepdims=bool(keepdim), dtype=om)
    if x.ndim == 0 and keepdim:
        r = np.reshape(r, ())
    return _astype(np.asarray(r), rdt)


@register_kernel("aten::sum.IntList_out", 5)
def sum_intlist_out(self, dim=None, keepdim=False, dtype=None, out=None):
    return _reduce("aten::sum.IntList_out", self, dim, keepdim, dtype, out, mean=False)


@register_kernel("aten::sum.out", 3)
def sum_full_out(self, dtype=None, out=None):
    return _reduce("aten::sum.out", self, None, False, dtype, out, mean=False)


@register_kernel("aten::mean.out", 5)
def mean_out(self, dim=None, keepdim=False, dtype=None, out=None):
    return _reduce("aten::mean.out", self, dim, keepdim, dtype, out, mean=True)


@register_kernel("aten::mean.dtype_out", 3)
def mean_dtype_out(self, dtype=None, out=None):
    return _reduce("aten::mean.dtype_out", self, None, False, dtype, out, mean=True)


# ---------------------------------------------------------------------------------------------
# shape / copy ops (the out dtype may differ: results are copied into it, as Tensor.copy_)
# ---------------------------------------------------------------------------------------------

def _infer_size(op, size, numel) -> tuple[int, ...]:
    size = [int(s) for s in size]
    neg = [i for i, s in enumerate(size) if s == -1]
    if len(neg) > 1:
        raise KernelError(f"{op}: only one dimension can be inferred")
    if any(s < -1 for s in size):
        raise KernelError(f"{op}: invalid shape dimension in {size}")
    known = 1
    for s in size:
        if s != -1:
            known *= s
    if neg:
        if known == 0 or numel % known:
            raise KernelError(f"{op}: shape {size} is invalid for input of size {numel}")
        size[neg[0]] = numel // known
    elif known != numel:
        raise KernelError(f"{op}: shape {size} is invalid for input of size {numel}")
    return tuple(size)


@register_kernel("aten::view_copy.out", 3, cast="any")
def view_copy_out(self, size, out=None):
    x = _arr(self)
    return np.array(x.reshape(_infer_size("aten::view_copy.out", size, x.size)), copy=True)


@register_kernel("aten::permute_copy.out", 3, cast="any")
def permute_copy_out(self, dims, out=None):
    op = "aten::permute_copy.out"
    x = _arr(self)
    dims = [int(d) for d in dims]
    if len(dims) != x.ndim:
        raise KernelError(f"{op}: number of dims don't match in permute ({len(dims)} for a "
                          f"{x.ndim}-d tensor)")
    w = [_wrap_dim(d, x.ndim, op) for d in dims] if x.ndim else []
    if len(set(w)) != len(w):
        raise KernelError(f"{op}: repeated dim in permute {dims}")
    return np.array(np.transpose(x, w), copy=True, order="C")  # a C-ordered copy; 0-d stays 0-d


@register_kernel("aten::transpose_copy.int_out", 4, cast="any")
def transpose_copy_out(self, dim0, dim1, out=None):
    op = "aten::transpose_copy.int_out"
    x = _arr(self)
    d0, d1 = _wrap_dim(int(dim0), x.ndim, op), _wrap_dim(int(dim1), x.ndim, op)
    if x.ndim == 0:
        return x.copy()
    return np.array(np.swapaxes(x, d0, d1), copy=True, order="C")


@register_kernel("aten::cat.out", 3)
def cat_out(tensors, dim=0, out=None):
    op = "aten::cat.out"
    ts = [_arr(t) for t in tensors]
    if not ts:
        raise KernelError(f"{op}: expected a non-empty list of Tensors")
    if any(t.ndim == 0 for t in ts):
        raise KernelError(f"{op}: zero-dimensional tensor cannot be concatenated")
    rt = result_type(*ts)
    # legacy behaviour: 1-d empty tensors are skipped
    kept = [t for t in ts if not (t.ndim == 1 and t.shape[0] == 0)]
    if not kept:
        return np.zeros((0,), dtype=rt)
    d = _wrap_dim(int(dim), kept[0].ndim, op)
    ref = kept[0].shape
    for t in kept[1:]:
        if t.ndim != len(ref) or any(t.shape[i] != ref[i] for i in range(len(ref)) if i != d):
            raise KernelError(f"{op}: sizes of tensors must match except in dimension {d}; got "
                              f"{[list(t.shape) for t in kept]}")
    return np.concatenate([_astype(t, rt) for t in kept], axis=d)


@register_kernel("aten::slice_copy.Tensor_out", 6, cast="any")
def slice_copy_out(self, dim=0, start=None, end=None, step=1, out=None):
    op = "aten::slice_copy.Tensor_out"
    x = _arr(self)
    if x.ndim == 0:
        raise KernelError(f"{op}: slice() cannot be applied to a 0-dim tensor")
    d = _wrap_dim(int(dim), x.ndim, op)
    step = int(step)
    if step <= 0:
        raise KernelError(f"{op}: slice step must be positive")
    n = x.shape[d]
    s = 0 if start is None else int(start)
    e = n if end is None else int(end)
    if s < 0:
        s += n
    if e < 0:
        e += n
    s = min(max(s, 0), n)
    e = min(max(e, 0), n)
    e = max(e, s)
    idx = [slice(None)] * x.ndim
    idx[d] = slice(s, e, step)
    return np.array(x[tuple(idx)], copy=True, order="C")


@register_kernel("aten::select_copy.int_out", 4, cast="any")
def select_copy_out(self, dim, index, out=None):
    op = "aten::select_copy.int_out"
    x = _arr(self)
    if x.ndim == 0:
        raise KernelError(f"{op}: select() cannot be applied to a 0-dim tensor")
    d = _wrap_dim(int(dim), x.ndim, op)
    n = x.shape[d]
    i = int(index)
    if not -n <= i < n:
        raise KernelError(f"{op}: index {i} out of range for tensor of size {list(x.shape)} at "
                          f"dimension {d}")
    return np.array(np.take(x, i % n, axis=d), copy=True, order="C")


@register_kernel("aten::expand_copy.out", 4, cast="any")
def expand_copy_out(self, size, implicit=False, out=None):
    op = "aten::expand_copy.out"
    x = _arr(self)
    size = [int(s) for s in size]
    if len(size) < x.ndim:
        raise KernelError(f"{op}: the number of sizes provided ({len(size)}) must be greater or equal "
                          f"to the number of dimensions in the tensor ({x.ndim})")
    lead = len(size) - x.ndim
    target = []
    for i, s in enumerate(size):
        if i < lead:
            if s < 0:
                raise KernelError(f"{op}: the expanded size of the tensor ({s}) isn't allowed in a "
                                  "leading, non-existing dimension")
            target.append(s)
            continue
        cur = x.shape[i - lead]
        if s == -1:
            target.append(cur)
        elif cur == s or cur == 1:
            target.append(s)
        else:
            raise KernelError(f"{op}: the expanded size of the tensor ({s}) must match the existing "
                              f"size ({cur}) at non-singleton dimension {i}. Target sizes: {size}. "
                              f"Tensor sizes: {list(x.shape)}")
    return np.array(np.broadcast_to(x, tuple(target)), copy=True)


@register_kernel("aten::unsqueeze_copy.out", 3, cast="any")
def unsqueeze_copy_out(self, dim, out=None):
    op = "aten::unsqueeze_copy.out"
    x = _arr(self)
    d = int(dim)
    n = x.ndim + 1
    if not -n <= d < n:
        raise KernelError(f"{op}: dimension {d} out of range (expected to be in range of "
                          f"[{-n}, {n - 1}])")
    return np.expand_dims(x, d % n).copy()


def _squeeze(op, x, dims):
    x = _arr(x)
    if x.ndim == 0:
        for d in dims:
            _wrap_dim(int(d), 0, op)
        return x.copy()
    wrapped = [_wrap_dim(int(d), x.ndim, op) for d in dims]
    if len(set(wrapped)) != len(wrapped):
        raise KernelError(f"{op}: dim {next(d for d in wrapped if wrapped.count(d) > 1)} appears "
                          f"multiple times in the list of dims")
    w = sorted(set(wrapped))
    keep = tuple(d for d in w if x.shape[d] == 1)
    return np.squeeze(x, axis=keep).copy() if keep else x.copy()


@register_kernel("aten::squeeze_copy.dims_out", 3, cast="any")
def squeeze_copy_dims_out(self, dim, out=None):
    return _squeeze("aten::squeeze_copy.dims_out", self, list(dim))


@register_kernel("aten::squeeze_copy.dim_out", 3, cast="any")
def squeeze_copy_dim_out(self, dim, out=None):
    return _squeeze("aten::squeeze_copy.dim_out", self, [dim])


@register_kernel("aten::clone.out", 3, cast="any")
def clone_out(self, memory_format=None, out=None):
    return np.array(_arr(self), copy=True)


@register_kernel("aten::_to_copy.out", 4, cast="any")
def to_copy_out(self, non_blocking=False, memory_format=None, out=None):
    x = _arr(self)
    if out is None or out.dtype is None:
        return np.array(x, copy=True)
    return np.array(_astype(x, out.dtype), copy=True)


# ---------------------------------------------------------------------------------------------
# quantized_decomposed
# ---------------------------------------------------------------------------------------------

def _q_params(op, scale, zero_point):
    s = float(_scalar(scale, "scale"))
    z = int(_scalar(zero_point, "zero_point"))
    return s, z


def _quantize(op, x, scale, zp, qmin, qmax, dtype, out):
    x = _arr(x)
    if not _is_float(x.dtype):
        raise KernelError(f"{op}: expecting input to have a floating dtype, got {x.dtype}")
    dt = _scalar_type(dtype, "dtype", op)
    if out is not None and out.dtype is not None and np.dtype(out.dtype) != dt:
        raise KernelError(f"{op}: out dtype {out.dtype} differs from the dtype argument {dt}")
    qmin, qmax = int(qmin), int(qmax)
    if qmin > qmax:
        raise KernelError(f"{op}: quant_min {qmin} > quant_max {qmax}")
    inv = np.float32(1.0 / scale)      # torch.round(input * (1.0 / scale)) in float32
    with np.errstate(all="ignore"):
        q = np.rint(_astype(x, _F32) * inv).astype(np.float64) + zp
    return np.clip(q, qmin, qmax).astype(dt)


def _dequantize(op, x, scale, zp, dtype, out_dtype, out):
    x = _arr(x)
    dt = _scalar_type(dtype, "dtype", op)
    if x.dtype != dt:
        raise KernelError(f"{op}: expecting input to have dtype {dt}, got {x.dtype}")
    odt = _F32 if out_dtype is None else _scalar_type(out_dtype, "out_dtype", op)
    if out is not None and out.dtype is not None and out_dtype is None:
        odt = np.dtype(out.dtype)
    om = _opmath(odt)
    with np.errstate(all="ignore"):
        r = (_astype(x, om) - np.asarray(zp, dtype=om)) * np.asarray(scale, dtype=om)
    return _astype(r, odt)


@register_kernel("quantized_decomposed::quantize_per_tensor.out", 7, cast="strict")
def quantize_per_tensor_out(input, scale, zero_point, quant_min, quant_max, dtype, out=None):
    op = "quantized_decomposed::quantize_per_tensor.out"
    s, z = _q_params(op, scale, zero_point)
    return _quantize(op, input, s, z, quant_min, quant_max, dtype, out)


@register_kernel("quantized_decomposed::quantize_per_tensor.Tensor_out", 7, cast="strict")
def quantize_per_tensor_tensor_out(input, scale, zero_point, quant_min, quant_max, dtype, out=None):
    op = "quantized_decomposed::quantize_per_tensor.Tensor_out"
    s, z = _q_params(op, scale, zero_point)
    return _quantize(op, input, s, z, quant_min, quant_max, dtype, out)


@register_kernel("quantized_decomposed::dequantize_per_tensor.out", 8, cast="strict")
def dequantize_per_tensor_out(input, scale, zero_point, quant_min, quant_max, dtype,
                              out_dtype=None, out=None):
    op = "quantized_decomposed::dequantize_per_tensor.out"
    s, z = _q_params(op, scale, zero_point)
    return _dequantize(op, input, s, z, dtype, out_dtype, out)


@register_kernel("quantized_decomposed::dequantize_per_tensor.Tensor_out", 8, cast="strict")
def dequantize_per_tensor_tensor_out(input, scale, zero_point, quant_min, quant_max, dtype,
                                     out_dtype=None, out=None):
    op = "quantized_decomposed::dequantize_per_tensor.Tensor_out"
    s, z = _q_params(op, scale, zero_point)
    return _dequantize(op, input, s, z, dtype, out_dtype, out)


def run_kernel(name: str, inputs: Sequence[Any], out: OutInfo | None = None) -> np.ndarray:
    """Run a registered kernel and cast its result to ``out`` (convenience for tests and tools)."""
    k = get_kernel(name)
    if len(inputs) != k.n_inputs:
        raise KernelError(f"{name} takes {k.n_inputs} arguments before out, got {len(inputs)}")
    return cast_to_out(k.fn(*inputs, out=out), out, name, k.cast)
