"""The KV cache manager (ExecuTorch's smart mask) and the per-call input builders."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from qnnrt.errors import InputError

from qnnrt.llm.errors import ContextLengthError, LayoutError
from qnnrt.llm.layout import LlmLayout, MethodLayout
from qnnrt.llm.quant import QUANT_DTYPES as _QUANT_DTYPES

# KV cache (smart mask)
class KVCache:
    """The logical caches: k[l] [1,H,D,Cmax], v[l] [1,H,Cmax,D], Cmax = C - min(T); slots < n_past valid."""

    def __init__(self, layout: LlmLayout, fill=0):
        self.layout = layout
        L, H, D, Cm = layout.n_layers, layout.n_kv_heads, layout.head_dim, layout.max_cache_len
        self.k = [np.full((1, H, D, Cm), fill, dtype=layout.cache_dtype) for _ in range(L)]
        self.v = [np.full((1, H, Cm, D), fill, dtype=layout.cache_dtype) for _ in range(L)]
        self.n_past = 0

    def reset(self) -> None:
        for a in self.k + self.v:
            a[...] = 0
        self.n_past = 0

    def truncate(self, n: int) -> None:
        """Keep the first n entries (a shared prefix); later slots are masked closed and rewritten."""
        if not 0 <= n <= self.n_past:
            raise InputError(f"truncate to {n} outside [0, {self.n_past}]")
        self.n_past = n

    def inputs(self, method: MethodLayout) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The method's cache inputs: its first C-T slots (contiguous arrays)."""
        n = self.layout.context_len - method.ar_len
        return ([np.ascontiguousarray(k[..., :n]) for k in self.k],
                [np.ascontiguousarray(v[:, :, :n, :]) for v in self.v])

    def update(self, method: MethodLayout, k_out: Sequence[np.ndarray], v_out: Sequence[np.ndarray],
               n_update: int) -> None:
        """Write the first n_update new entries at slots [n_past, n_past + n_update); advance n_past."""
        cap = self.layout.context_len - method.ar_len
        if not 0 <= n_update <= method.ar_len:
            raise InputError(f"n_update {n_update} outside [0, {method.ar_len}]")
        if self.n_past + n_update > cap:
            raise ContextLengthError(f"{method.name}: writing {n_update} cache entries at position {self.n_past} "
                                     f"exceeds its {cap} cache slots (context {self.layout.context_len})")
        p = self.n_past
        for l in range(self.layout.n_layers):
            ko, vo = np.asarray(k_out[l]), np.asarray(v_out[l])
            if ko.dtype != self.layout.cache_dtype or vo.dtype != self.layout.cache_dtype:
                raise TypeError(f"layer {l}: cache outputs are {ko.dtype}/{vo.dtype}, "
                                f"expected {self.layout.cache_dtype}")
            self.k[l][..., p:p + n_update] = ko[..., :n_update]
            self.v[l][:, :, p:p + n_update, :] = vo[:, :, :n_update, :]
        self.n_past = p + n_update

    def dequantized(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Valid slots as float32 (through the kv quant attrs when the caches are quantized)."""
        n = self.n_past
        ks, vs = [], []
        for l in range(self.layout.n_layers):
            k, v = self.k[l][..., :n], self.v[l][:, :, :n, :]
            kq, vq = self.layout.k_quant[l], self.layout.v_quant[l]
            if self.layout.cache_dtype in _QUANT_DTYPES and (kq is None or vq is None):
                raise LayoutError(f"layer {l}: no get_kv_output_<i>_quant_attr to dequantize the caches")
            ks.append(kq.dequantize(k) if kq else k.astype(np.float32))
            vs.append(vq.dequantize(v) if vq else v.astype(np.float32))
        return ks, vs


# ------------------------------------------------------------------------------------------------
# input builders
def build_mask(method: MethodLayout, context_len: int, n_past: int) -> np.ndarray:
    """[1,1,T,C]: row i opens cache columns [0, n_past) and new columns C-T .. C-T+i."""
    T, C = method.ar_len, context_len
    if n_past > C - T:
        raise ContextLengthError(f"{method.name}: n_past {n_past} > cache slots {C - T}")
    m = np.full((1, 1, T, C), method.mask_closed, dtype=method.mask_dtype)
    m[..., :n_past] = method.mask_open
    rows = np.arange(T)
    causal = rows[None, :] <= rows[:, None]              # [i, j]: j <= i
    m[0, 0, :, C - T:] = np.where(causal, method.mask_open, method.mask_closed).astype(method.mask_dtype)
    return m


def build_step_inputs(layout: LlmLayout, method: MethodLayout, cache: KVCache, tokens: Sequence[int],
                      pad_token: int = 0) -> dict[str, np.ndarray]:
    """Inputs of one call of ``method`` at cache.n_past with up to T tokens (right-padded)."""
    T = method.ar_len
    n = len(tokens)
    if not 1 <= n <= T:
        raise InputError(f"{method.name}: {n} tokens for a window of {T}")
    if cache.n_past + n > layout.context_len - T:
        raise ContextLengthError(f"{method.name}: {n} tokens at position {cache.n_past} exceed its "
                                 f"{layout.context_len - T} cache slots (context {layout.context_len}, window {T})")
    tok = np.full((1, T), pad_token, dtype=method.token_dtype)
    tok[0, :n] = np.asarray(tokens, dtype=np.int64)
    pos = (cache.n_past + np.arange(T, dtype=np.int64)).astype(method.inputs[2].dtype)[None, :]
    mask = build_mask(method, layout.context_len, cache.n_past)
    ks, vs = cache.inputs(method)
    arrays = [tok, mask, pos] + ks + vs
    return {spec.name: a for spec, a in zip(method.inputs, arrays)}


def split_outputs(layout: LlmLayout, method: MethodLayout, outputs) -> tuple[np.ndarray, list, list]:
    """(logits, k_outs, v_outs) from a name->array mapping or a positional sequence."""
    if isinstance(outputs, Mapping):
        try:
            seq = [outputs[n] for n in method.output_names]
        except KeyError as e:
            raise KeyError(f"{method.name}: output {e} missing (have {sorted(outputs)})") from None
    else:
        seq = list(outputs)
    L = layout.n_layers
    if len(seq) != 1 + 2 * L:
        raise InputError(f"{method.name}: {len(seq)} outputs, expected {1 + 2 * L}")
    return np.asarray(seq[0]), seq[1:1 + L], seq[1 + L:]


def logits_to_float(layout: LlmLayout, logits: np.ndarray) -> np.ndarray:
    if layout.logits_quant is not None:
        return layout.logits_quant.dequantize(logits)
    return np.asarray(logits, dtype=np.float32)

