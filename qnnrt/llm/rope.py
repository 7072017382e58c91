"""RoPE positions computed on the host, as Genie does for a bundle whose graphs take
``position_ids_cos`` / ``position_ids_sin`` [1, 1, AR, rope-dim]: the rows of every position of
the context, made once from the config's settings (theta, rope-dim, Llama 3 or longrope scaling), in the
inputs' dtype (quantized with the input's own encoding for a fixed-point graph, each code the
floor of value / scale + zero point: what Genie's dumped tables hold, to the last code)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qnnrt.formats.genie import LongRope, RopeConfig, RopeScaling
from qnnrt.llm.errors import LayoutError
from qnnrt.llm.quant import FLOAT_DTYPES, QUANT_DTYPES, QuantParams


def inverse_frequencies(rope: RopeConfig, context: int = 0) -> np.ndarray:
    """float64 [dim]: theta^(-2i / (2 dim)), then the config's scaling: Llama 3's (Hugging Face's
    `_compute_llama3_parameters`) or longrope's (its long factors when `context` exceeds the
    original length, else its short ones); Genie's tables are these (its dumps, docs/genie.md)."""
    d = 2 * rope.dim
    inv = 1.0 / rope.theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    if isinstance(rope.scaling, RopeScaling):
        return _llama3(inv, rope.scaling)
    if isinstance(rope.scaling, LongRope):
        s = rope.scaling
        return inv / np.asarray(s.long_factor if context > s.original_max_positions else s.short_factor)
    return inv


def attention_factor(rope: RopeConfig) -> float:
    """What cos / sin are multiplied by: longrope's sqrt(1 + ln factor / ln original), else 1."""
    s = rope.scaling
    if isinstance(s, LongRope) and s.factor > 1:
        return math.sqrt(1 + math.log(s.factor) / math.log(s.original_max_positions))
    return 1.0


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
              sin_quant: QuantParams | None, context: int | None = None) -> RopeTable:
        """`positions` rows; `context`: the context size longrope chooses its factors by (default `positions`)."""
        inv = inverse_frequencies(rope, positions if context is None else context)
        angles = np.arange(positions, dtype=np.float64)[:, None] * inv[None, :]
        a = attention_factor(rope)
        return RopeTable(_encode(np.cos(angles) * a, np.dtype(dtype), cos_quant, "position_ids_cos"),
                         _encode(np.sin(angles) * a, np.dtype(dtype), sin_quant, "position_ids_sin"))

    @property
    def dim(self) -> int:
        return int(self.cos.shape[1])
