"""quantized_decomposed quantize / dequantize per tensor."""
from __future__ import annotations

import numpy as np

from qnnrt.errors import KernelError
from qnnrt.executorch.kernels.dtypes import _arr, astype, _F32, _is_float, _opmath, _scalar, _scalar_type
from qnnrt.executorch.kernels.dtypes import Value
from qnnrt.executorch.kernels.registry import OutInfo, register_kernel


def _q_params(op: str, scale: Value, zero_point: Value) -> tuple[float, int]:
    s = float(_scalar(scale, "scale"))
    z = int(_scalar(zero_point, "zero_point"))
    return s, z


def _quantize(op: str, x: Value, scale: Value, zp: Value, qmin: Value, qmax: Value, dtype: Value,
              out: OutInfo | None) -> np.ndarray:
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
        q = np.rint(astype(x, _F32) * inv).astype(np.float64) + zp
    return np.clip(q, qmin, qmax).astype(dt)


def _dequantize(op: str, x: Value, scale: Value, zp: Value, dtype: Value, out_dtype: Value,
                out: OutInfo | None) -> np.ndarray:
    x = _arr(x)
    dt = _scalar_type(dtype, "dtype", op)
    if x.dtype != dt:
        raise KernelError(f"{op}: expecting input to have dtype {dt}, got {x.dtype}")
    odt = _F32 if out_dtype is None else _scalar_type(out_dtype, "out_dtype", op)
    if out is not None and out.dtype is not None and out_dtype is None:
        odt = np.dtype(out.dtype)
    om = _opmath(odt)
    with np.errstate(all="ignore"):
        r = (astype(x, om) - np.asarray(zp, dtype=om)) * np.asarray(scale, dtype=om)
    return astype(r, odt)


@register_kernel("quantized_decomposed::quantize_per_tensor.out", 7, cast="strict")
def quantize_per_tensor_out(input: Value, scale: Value, zero_point: Value, quant_min: Value,
                            quant_max: Value, dtype: Value, out: OutInfo | None = None) -> np.ndarray:
    op = "quantized_decomposed::quantize_per_tensor.out"
    s, z = _q_params(op, scale, zero_point)
    return _quantize(op, input, s, z, quant_min, quant_max, dtype, out)


@register_kernel("quantized_decomposed::quantize_per_tensor.Tensor_out", 7, cast="strict")
def quantize_per_tensor_tensor_out(input: Value, scale: Value, zero_point: Value, quant_min: Value,
                                   quant_max: Value, dtype: Value, out: OutInfo | None = None) -> np.ndarray:
    op = "quantized_decomposed::quantize_per_tensor.Tensor_out"
    s, z = _q_params(op, scale, zero_point)
    return _quantize(op, input, s, z, quant_min, quant_max, dtype, out)


@register_kernel("quantized_decomposed::dequantize_per_tensor.out", 8, cast="strict")
def dequantize_per_tensor_out(input: Value, scale: Value, zero_point: Value, quant_min: Value,
                              quant_max: Value, dtype: Value, out_dtype: Value = None,
                              out: OutInfo | None = None) -> np.ndarray:
    op = "quantized_decomposed::dequantize_per_tensor.out"
    s, z = _q_params(op, scale, zero_point)
    return _dequantize(op, input, s, z, dtype, out_dtype, out)


@register_kernel("quantized_decomposed::dequantize_per_tensor.Tensor_out", 8, cast="strict")
def dequantize_per_tensor_tensor_out(input: Value, scale: Value, zero_point: Value, quant_min: Value,
                                     quant_max: Value, dtype: Value, out_dtype: Value = None,
                                     out: OutInfo | None = None) -> np.ndarray:
    op = "quantized_decomposed::dequantize_per_tensor.Tensor_out"
    s, z = _q_params(op, scale, zero_point)
    return _dequantize(op, input, s, z, dtype, out_dtype, out)
