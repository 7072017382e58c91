"""PyTorch's dtype promotion and casting rules, and the operand helpers the kernels share."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import DTypeLike

from qnnrt.errors import KernelError

if TYPE_CHECKING:
    from qnnrt.executorch.kernels.registry import OutInfo

# An ExecuTorch value as the interpreter passes it to a kernel: an ndarray, a Python scalar, a list
# of them or None. Kernels check what they get (`_arr`, `_scalar`): a wrong kind is a KernelError.
Value = Any
Scalar = bool | int | float

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
except ImportError:  # pragma: no cover - ml_dtypes is optional
    _BF16 = None
    _EXTRA_FLOATS = set()
_REDUCED = {_F16} | _EXTRA_FLOATS


def _is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt in _EXTRA_FLOATS


def _is_bool(dt: np.dtype) -> bool:
    return dt == _BOOL


def _is_int(dt: np.dtype) -> bool:
    return dt.kind in "iu"


def promote_types(a: DTypeLike | None, b: DTypeLike | None) -> np.dtype | None:
    """PyTorch's ``torch.promote_types`` for real dtypes (None only when both are None)."""
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


def _operand_dtype(x: Value) -> tuple[int, np.dtype]:
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


def _combine(higher: np.dtype | None, lower: np.dtype | None) -> np.dtype | None:
    if higher is None:
        return lower
    if lower is None:
        return higher
    if _is_float(higher):
        return higher
    if _is_bool(higher) or _is_float(lower):
        return promote_types(higher, lower)
    return higher


def result_type(*operands: Value) -> np.dtype:
    """PyTorch's ``torch.result_type`` over tensors (numpy arrays) and Python scalars."""
    slots: list[np.dtype | None] = [None, None, None]   # scalars, zero-dim, dimensioned
    for x in operands:
        pr, dt = _operand_dtype(x)
        slots[pr] = promote_types(slots[pr], dt)
    common = _combine(slots[2], _combine(slots[1], slots[0]))
    if common is None:
        raise KernelError("result_type needs at least one operand")
    return common


def can_cast(frm: DTypeLike, to: DTypeLike) -> bool:
    """PyTorch's ``torch.can_cast``: no float -> integer/bool, no integer -> bool."""
    frm, to = np.dtype(frm), np.dtype(to)
    if _is_float(frm) and not _is_float(to):
        return False
    if not _is_bool(frm) and _is_bool(to):
        return False
    return True


def _opmath(dt: np.dtype) -> np.dtype:
    return _F32 if dt in _REDUCED else dt


def cast_to_out(result: np.ndarray, out: OutInfo | None, op: str, mode: str = "same_kind") -> np.ndarray:
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
    return astype(result, out.dtype)


def astype(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """`x` as dtype `dt` (the kernels' and the interpreter's one cast): nonzero is True for bool,
    out-of-range values convert without a warning."""
    dt = np.dtype(dt)
    if x.dtype == dt:
        return x
    if _is_bool(dt):
        return x != 0
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(dt)


def _arr(x: Value) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise KernelError(f"expected a tensor, got {type(x).__name__}")
    return x


def _scalar(x: Value, what: str) -> Scalar:
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


def _scalar_type(code: Value, what: str, op: str) -> np.dtype:
    from qnnrt.executorch.reader import (
        scalar_type_to_numpy,  # late import: formats -> runtime is fine
    )
    dt = scalar_type_to_numpy(int(code))
    if dt is None:
        raise KernelError(f"{op}: {what} ScalarType {code} is not supported by qnnrt's CPU kernels")
    return dt


def _to_operand(x: Value) -> Value:
    """Python scalars stay scalars; numpy generics become 0-d arrays."""
    if isinstance(x, np.generic):
        return np.asarray(x)
    return x
