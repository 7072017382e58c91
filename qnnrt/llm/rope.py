"""RoPE positions computed on the host, as Genie does for a bundle whose graphs take
``position_ids_cos`` / ``position_ids_sin`` [1, 1, AR, rope-dim]: the rows of every position of
the context, made once from the config's settings (theta, rope-dim, Llama 3 scaling), in the
inputs' dtype (quantized with the input's own encoding for a fixed-point graph, each code the
floor of value / scale + zero point: what Genie's dumped tables hold, to the last code)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qnnrt.formats.genie import RopeConfig, RopeScaling
from qnnrt.llm.errors import LayoutError
from qnnrt.llm.quant import FLOAT_DTYPES, QUANT_DTYPES, QuantParams


def inverse_frequencies(rope: RopeConfig) -> np.ndarray:
    """float64 [dim]: theta^(-2i / (2 dim)), then Llama 3's scaling when the config has it
    (Hugging Face's `_compute_llama3_parameters`)."""
    d = 2 * rope.dim
    inv = 1.0 / rope.theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    return inv if rope.scaling is None else _llama3(inv, rope.scaling)


def _llama3(inv: np.ndarray, s: RopeScaling) -> np.ndarray:
    low_wavelen = s.original_max_positions / s.low_freq_factor
    high_wavelen = s.original_max_positions / s.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / s.factor, inv)
    smooth = (s.original_max_positions / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, smoothed, scaled)


def _encode(x: np.ndarray, dtype: np.dtype, quant: QuantParams | None, what: str) -> np.ndarray:
    if dtype in FLOAT_DTYPES:
        return x.astype(dtype)
    if dtype in QUANT_DTYPES:
        if quant is None:
            raise LayoutError(f"{what} is {dtype} but its graph gives no quantization encoding")
        return quant.quantize(x, floor=True)     # Genie floors its tables (its dumps, docs/genie.md)
    raise LayoutError(f"{what} is {dtype}; expected float32/float16 or a fixed-point type")


@dataclass(frozen=True, eq=False)
class RopeTable:
    """cos / sin rows [positions, dim] in the inputs' dtypes: a call at positions p.. copies rows."""
    cos: np.ndarray
    sin: np.ndarray

    @staticmethod
    def build(rope: RopeConfig, positions: int, dtype: np.dtype, cos_quant: QuantParams | None,
              sin_quant: QuantParams | None) -> RopeTable:
        angles = np.arange(positions, dtype=np.float64)[:, None] * inverse_frequencies(rope)[None, :]
        return RopeTable(_encode(np.cos(angles), np.dtype(dtype), cos_quant, "position_ids_cos"),
                         _encode(np.sin(angles), np.dtype(dtype), sin_quant, "position_ids_sin"))

    @property
    def dim(self) -> int:
        return int(self.cos.shape[1])
