"""Shape ops that copy: view / permute / transpose / cat / slice / select / expand / (un)squeeze.

The out dtype may differ: results are copied into it, as Tensor.copy_.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from qnnrt.errors import KernelError
from qnnrt.executorch.kernels.dtypes import _arr, astype, _wrap_dim, result_type
from qnnrt.executorch.kernels.dtypes import Value
from qnnrt.executorch.kernels.registry import OutInfo, register_kernel


def _infer_size(op: str, size: Value, numel: Value) -> tuple[int, ...]:
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
def view_copy_out(self: Value, size: Value, out: OutInfo | None = None) -> np.ndarray:
    x = _arr(self)
    return np.array(x.reshape(_infer_size("aten::view_copy.out", size, x.size)), copy=True)


@register_kernel("aten::permute_copy.out", 3, cast="any")
def permute_copy_out(self: Value, dims: Value, out: OutInfo | None = None) -> np.ndarray:
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
def transpose_copy_out(self: Value, dim0: Value, dim1: Value, out: OutInfo | None = None) -> np.ndarray:
    op = "aten::transpose_copy.int_out"
    x = _arr(self)
    d0, d1 = _wrap_dim(int(dim0), x.ndim, op), _wrap_dim(int(dim1), x.ndim, op)
    if x.ndim == 0:
        return x.copy()
    return np.array(np.swapaxes(x, d0, d1), copy=True, order="C")


@register_kernel("aten::cat.out", 3)
def cat_out(tensors: Value, dim: Value = 0, out: OutInfo | None = None) -> np.ndarray:
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
    return np.concatenate([astype(t, rt) for t in kept], axis=d)


@register_kernel("aten::slice_copy.Tensor_out", 6, cast="any")
def slice_copy_out(self: Value, dim: Value = 0, start: Value = None, end: Value = None, step: Value = 1,
                   out: OutInfo | None = None) -> np.ndarray:
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
def select_copy_out(self: Value, dim: Value, index: Value, out: OutInfo | None = None) -> np.ndarray:
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
def expand_copy_out(self: Value, size: Value, implicit: Value = False, out: OutInfo | None = None) -> np.ndarray:
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
def unsqueeze_copy_out(self: Value, dim: Value, out: OutInfo | None = None) -> np.ndarray:
    op = "aten::unsqueeze_copy.out"
    x = _arr(self)
    d = int(dim)
    n = x.ndim + 1
    if not -n <= d < n:
        raise KernelError(f"{op}: dimension {d} out of range (expected to be in range of "
                          f"[{-n}, {n - 1}])")
    return np.expand_dims(x, d % n).copy()


def _squeeze(op: str, x: Value, dims: Iterable[int]) -> np.ndarray:
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
def squeeze_copy_dims_out(self: Value, dim: Value, out: OutInfo | None = None) -> np.ndarray:
    return _squeeze("aten::squeeze_copy.dims_out", self, list(dim))


@register_kernel("aten::squeeze_copy.dim_out", 3, cast="any")
def squeeze_copy_dim_out(self: Value, dim: Value, out: OutInfo | None = None) -> np.ndarray:
    return _squeeze("aten::squeeze_copy.dim_out", self, [dim])


@register_kernel("aten::index.Tensor_out", 3, cast="any")
def index_tensor_out(self: Value, indices: Value, out: OutInfo | None = None) -> np.ndarray:
    """`self[indices]` with PyTorch's (= NumPy's) advanced indexing: an index per leading dimension,
    None for a whole dimension, integer tensors (negative counts from the end) or boolean masks;
    an embedding lookup (`weight[ids]`) is this op."""
    op = "aten::index.Tensor_out"
    x = _arr(self)
    given = list(indices)
    if len(given) > x.ndim:
        raise KernelError(f"{op}: too many indices for tensor of dimension {x.ndim} (got {len(given)})")
    key: list[slice | np.ndarray] = []
    for d, idx in enumerate(given):
        if idx is None:
            key.append(slice(None))
            continue
        a = _arr(idx)
        if a.dtype == np.bool_:
            key.append(a)
            continue
        if not np.issubdtype(a.dtype, np.integer):
            raise KernelError(f"{op}: tensors used as indices must be long, int or bool; index {d} is {a.dtype}")
        n = x.shape[d]
        if a.size and (a.min() < -n or a.max() >= n):
            bad = int(a[(a < -n) | (a >= n)].flat[0])
            raise KernelError(f"{op}: index {bad} is out of bounds for dimension {d} with size {n}")
        key.append(a)
    try:
        return np.array(x[tuple(key)], copy=True, order="C")
    except IndexError as e:
        raise KernelError(f"{op}: {e}") from None
