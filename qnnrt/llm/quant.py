"""Affine per-tensor encodings of quantized LLM I/O (logits, caches) and the constant methods'
``get_kv_output_<i>_quant_attr`` values."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from qnnrt.errors import InputError

from qnnrt.llm.errors import LayoutError

QUANT_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.int8), np.dtype(np.int16))
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))

@dataclass(frozen=True)
class QuantParams:
    """Affine per-tensor encoding: real = (q - zero_point) * scale."""
    scale: float
    zero_point: int
    dtype: np.dtype
    qmin: int | None = None
    qmax: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        if not (self.scale > 0 and math.isfinite(self.scale)):
            raise InputError(f"quantization scale must be a positive finite number, got {self.scale!r}")
        info = np.iinfo(self.dtype)
        if self.qmin is None:
            object.__setattr__(self, "qmin", int(info.min))
        if self.qmax is None:
            object.__setattr__(self, "qmax", int(info.max))

    def quantize(self, x, floor: bool = False) -> np.ndarray:
        """`x` to the nearest code; `floor`: the code at or below (Genie's RoPE tables are floored)."""
        v = np.asarray(x, dtype=np.float64) / self.scale
        q = (np.floor(v) if floor else np.rint(v)) + self.zero_point
        return np.clip(q, self.qmin, self.qmax).astype(self.dtype)

    def dequantize(self, q) -> np.ndarray:
        return ((np.asarray(q).astype(np.float64) - self.zero_point) * self.scale).astype(np.float32)


def quantize(x, scale: float, zero_point: int, dtype=np.uint16) -> np.ndarray:
    return QuantParams(float(scale), int(zero_point), dtype).quantize(x)


def dequantize(q, scale: float, zero_point: int) -> np.ndarray:
    q = np.asarray(q)
    dt = q.dtype if q.dtype.kind in "iu" else np.dtype(np.int32)
    return QuantParams(float(scale), int(zero_point), dt).dequantize(q)


_DTYPE_NAMES = {"torch.uint8": np.uint8, "torch.uint16": np.uint16, "torch.int8": np.int8,
                "torch.int16": np.int16, "torch.int32": np.int32}


def parse_quant_attr(value, default_dtype=None) -> QuantParams:
    """A ``get_kv_output_<i>_quant_attr`` value: [scale, zero_point, quant_min, quant_max, dtype-string]."""
    if isinstance(value, Mapping):
        value = [value.get(k) for k in ("scale", "zero_point", "quant_min", "quant_max", "dtype")]
    v = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(v) < 2:
        raise LayoutError(f"quant attr {value!r}: expected [scale, zero_point, quant_min, quant_max, dtype]")
    dt = default_dtype
    if len(v) >= 5 and v[4] is not None:
        name = str(v[4])
        if name not in _DTYPE_NAMES:
            raise LayoutError(f"quant attr {value!r}: unknown dtype {name!r}")
        dt = _DTYPE_NAMES[name]
    if dt is None:
        raise LayoutError(f"quant attr {value!r}: no dtype")
    return QuantParams(float(v[0]), int(v[1]), dt,
                       int(v[2]) if len(v) > 2 and v[2] is not None else None,
                       int(v[3]) if len(v) > 3 and v[3] is not None else None)

