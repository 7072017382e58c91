"""The KV cache manager (ExecuTorch's smart mask) and the per-call input builders."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from qnnrt.errors import InputError

from qnnrt.llm.errors import ContextLengthError, LayoutError
from qnnrt.llm.layout import LlmLayout, MethodLayout
from qnnrt.llm.quant import QUANT_DTYPES as _QUANT_DTYPES

@dataclass(frozen=True)
class WindowTree:
    """How the T slots of one call see each other when they are not one causal chain (a lookahead
    step: parallel branches in one window): slot s sits at position n_past + offsets[s] and sees
    the slots `visible[s]` marks (always itself), besides the cache entries [0, n_past)."""
    offsets: tuple[int, ...]
    visible: np.ndarray                  # bool [T, T]

    @staticmethod
    def from_parents(parents: Sequence[int], offsets: Sequence[int]) -> WindowTree:
        """Each slot sees what its parent sees and itself (-1: no parent); a parent comes first."""
        T = len(parents)
        vis = np.eye(T, dtype=bool)
        for s, par in enumerate(parents):
            if par >= 0:
                if par >= s:
                    raise ValueError(f"slot {s}: parent {par} does not come before it")
                vis[s] |= vis[par]
        return WindowTree(tuple(int(o) for o in offsets), vis)


# KV cache (smart mask)
Alloc = Callable[[tuple[int, ...], np.dtype], np.ndarray]   # a zeroed array of that shape and dtype


def _zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.zeros(shape, dtype)


def _clear(ks: Sequence[np.ndarray], vs: Sequence[np.ndarray], fill: tuple[Sequence[int], Sequence[int]],
           lo: int, hi: int) -> None:
    """Slots [lo, hi) of every layer's k [1,H,D,S] and v [1,H,S,D] set to that layer's fill."""
    if lo >= hi:
        return
    for k, f in zip(ks, fill[0]):
        k[..., lo:hi] = f
    for v, f in zip(vs, fill[1]):
        v[:, :, lo:hi, :] = f


def _layers(alloc: Alloc, fused: bool, n: int, shape: tuple[int, ...], dtype: np.dtype
            ) -> tuple[np.ndarray | None, list[np.ndarray]]:
    """n arrays of `shape`: views of one [n, *shape] array when fused (so one copy writes a slot
    of every layer), else one allocation each (each its own shared buffer)."""
    if fused:
        whole = alloc((n, *shape), dtype)
        return whole, list(whole)
    return None, [alloc(shape, dtype) for _ in range(n)]


class _Mirror:
    """A method's own cache arrays when its window leaves fewer slots than the logical caches
    (the prefill method of a hybrid file): slots [0, slots) of the logical caches, brought up to
    date before each of its calls (only the slots written since: `dirty`)."""

    def __init__(self, cache: KVCache, slots: int) -> None:
        lay = cache.layout
        L, H, D = lay.n_layers, lay.n_kv_heads, lay.head_dim
        self.slots = slots
        self.k_all, self.k = _layers(cache.alloc, cache.fused, L, (1, H, D, slots), lay.cache_dtype)
        self.v_all, self.v = _layers(cache.alloc, cache.fused, L, (1, H, slots, D), lay.cache_dtype)
        if any(cache.fill[0]) or any(cache.fill[1]):
            _clear(self.k, self.v, cache.fill, 0, slots)
        # slots [lo, hi) that may differ from the logical caches (both hold the fill where never written)
        self.dirty = (0, min(cache.written, slots))

    def wrote(self, lo: int, hi: int) -> None:
        a, b = self.dirty
        self.dirty = (lo, hi) if a >= b else (min(a, lo), max(b, hi))

    def sync(self, cache: KVCache) -> None:
        lo, hi = self.dirty[0], min(self.dirty[1], self.slots)
        if lo < hi:
            for km, k in zip(self.k, cache.k):
                km[..., lo:hi] = k[..., lo:hi]
            for vm, v in zip(self.v, cache.v):
                vm[:, :, lo:hi, :] = v[:, :, lo:hi, :]
        self.dirty = (0, 0)


class KVCache:
    """The logical caches: k[l] [1,H,D,Cmax], v[l] [1,H,Cmax,D], Cmax = C - min(T); slots < n_past valid.

    They are the decode method's cache inputs as they are (a prepared step binds them into its
    graph call); a method with a wider window reads a mirror of its first C - T slots (`arrays`).
    `alloc` makes the arrays (the runner gives `Program.buffer`: the shared arena under multi-PD,
    rpcmem with shared buffers); `fused` keeps each kind in one array (`k_all`, `v_all`, layers
    its views), so a token's new entries are one copy per kind. A never-written slot holds
    `layout.cache_fill()` (0.0 of a quantized cache is its zero point, which is how Genie clears
    one; graphs that do not zero the columns the mask closes read it)."""

    def __init__(self, layout: LlmLayout, alloc: Alloc | None = None, fused: bool = True):
        self.layout = layout
        self.alloc, self.fused = alloc or _zeros, fused
        self.fill = layout.cache_fill()
        L, H, D, Cm = layout.n_layers, layout.n_kv_heads, layout.head_dim, layout.max_cache_len
        self.k_all, self.k = _layers(self.alloc, fused, L, (1, H, D, Cm), layout.cache_dtype)
        self.v_all, self.v = _layers(self.alloc, fused, L, (1, H, Cm, D), layout.cache_dtype)
        if any(self.fill[0]) or any(self.fill[1]):     # the arrays come zeroed
            _clear(self.k, self.v, self.fill, 0, Cm)
        self.n_past = 0
        self.written = 0   # slots [0, written) may hold entries other than the fill
        self._mirrors: dict[str, _Mirror] = {}

    def reset(self) -> None:
        """Every slot back to the fill (only those ever written are touched), n_past 0."""
        w = self.written
        _clear(self.k, self.v, self.fill, 0, w)
        for m in self._mirrors.values():
            m.wrote(0, w)
        self.written = 0
        self.n_past = 0

    def truncate(self, n: int) -> None:
        """Keep the first n entries (a shared prefix); later slots are masked closed and rewritten."""
        if not 0 <= n <= self.n_past:
            raise InputError(f"truncate to {n} outside [0, {self.n_past}]")
        self.n_past = n

    def inputs(self, method: MethodLayout) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The method's cache inputs: its first C-T slots (contiguous arrays)."""
        n = self.layout.cache_slots(method)
        return ([np.ascontiguousarray(k[..., :n]) for k in self.k],
                [np.ascontiguousarray(v[:, :, :n, :]) for v in self.v])

    def arrays(self, method: MethodLayout) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The arrays `method` reads its caches from in place: the logical caches when its window
        leaves all their slots, else its mirror (made on first use; `sync` before each call)."""
        n = self.layout.cache_slots(method)
        if n == self.layout.max_cache_len:
            return self.k, self.v
        m = self._mirrors.get(method.name)
        if m is None:
            m = self._mirrors[method.name] = _Mirror(self, n)
        return m.k, m.v

    def sync(self, method: MethodLayout) -> None:
        """Bring `method`'s mirror (if it has one) up to date with the logical caches."""
        m = self._mirrors.get(method.name)
        if m is not None:
            m.sync(self)

    def update(self, method: MethodLayout, k_out: Sequence[np.ndarray], v_out: Sequence[np.ndarray],
               n_update: int, slots: Sequence[int] | None = None) -> None:
        """Write the first n_update new entries at slots [n_past, n_past + n_update); advance n_past."""
        for l in range(self.layout.n_layers):
            ko, vo = np.asarray(k_out[l]), np.asarray(v_out[l])
            if ko.dtype != self.layout.cache_dtype or vo.dtype != self.layout.cache_dtype:
                raise TypeError(f"layer {l}: cache outputs are {ko.dtype}/{vo.dtype}, "
                                f"expected {self.layout.cache_dtype}")
        self.put(method, k_out, v_out, n_update, slots=slots)

    def put(self, method: MethodLayout, k_out: Sequence[np.ndarray], v_out: Sequence[np.ndarray],
            n_update: int, k_out_all: np.ndarray | None = None, v_out_all: np.ndarray | None = None,
            slots: Sequence[int] | None = None) -> None:
        """`update` for outputs known to be of the cache dtype (a prepared step's buffers); with
        the outputs fused too (`k_out_all` [L, ...]), one copy per kind. `slots`: the window slots
        whose entries to keep, in order (default: the first n_update)."""
        cap = self.layout.cache_slots(method)
        if not 0 <= n_update <= method.ar_len:
            raise InputError(f"n_update {n_update} outside [0, {method.ar_len}]")
        p = self.n_past
        if p + n_update > cap:
            raise ContextLengthError(f"{method.name}: writing {n_update} cache entries at position {p} "
                                     f"exceeds its {cap} cache slots (context {self.layout.context_len})")
        e = p + n_update
        cols: slice | list[int] = slice(0, n_update) if slots is None else list(slots)[:n_update]
        if k_out_all is not None and v_out_all is not None and self.k_all is not None \
                and self.v_all is not None:
            self.k_all[..., p:e] = k_out_all[..., cols]
            self.v_all[:, :, :, p:e, :] = v_out_all[:, :, :, cols, :]
        else:
            for k, ko in zip(self.k, k_out):
                k[..., p:e] = ko[..., cols]
            for v, vo in zip(self.v, v_out):
                v[:, :, p:e, :] = vo[:, :, cols, :]
        self.n_past = e
        if e > self.written:
            self.written = e
        for m in self._mirrors.values():
            m.wrote(p, e)

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
def window_visibility(method: MethodLayout, tree: WindowTree | None) -> np.ndarray:
    """[T, T] bool: which of the call's own slots each row sees (causal without a tree)."""
    if tree is not None:
        return tree.visible
    rows = np.arange(method.ar_len)
    return rows[None, :] <= rows[:, None]              # [i, j]: j <= i


def build_mask(method: MethodLayout, context_len: int, n_past: int, tree: WindowTree | None = None) -> np.ndarray:
    """[1,1,T,C]: every row opens cache columns [0, n_past); row i opens new columns C-T+j for the
    slots j it sees (j <= i without a tree)."""
    T, C = method.ar_len, context_len
    if n_past > C - T:
        raise ContextLengthError(f"{method.name}: n_past {n_past} > cache slots {C - T}")
    m = np.full((1, 1, T, C), method.mask_closed, dtype=method.mask_dtype)
    m[..., :n_past] = method.mask_open
    vis = window_visibility(method, tree)
    m[0, 0, :, C - T:] = np.where(vis, method.mask_open, method.mask_closed).astype(method.mask_dtype)
    return m


def build_step_inputs(layout: LlmLayout, method: MethodLayout, cache: KVCache, tokens: Sequence[int],
                      pad_token: int = 0, tree: WindowTree | None = None) -> dict[str, np.ndarray]:
    """Inputs of one call of ``method`` at cache.n_past with up to T tokens (right-padded), the
    slots a causal chain or laid out by `tree`."""
    T = method.ar_len
    check_call(layout, method, cache.n_past, len(tokens), tree)
    tok = np.full((1, T), pad_token, dtype=method.token_dtype)
    tok[0, :len(tokens)] = np.asarray(tokens, dtype=np.int64)
    pos = [np.zeros(s.shape, s.dtype) for s in method.position_inputs]
    write_positions(layout, method, pos, cache.n_past + window_offsets(T, tree))
    mask = build_mask(method, layout.context_len, cache.n_past, tree)
    ks, vs = cache.inputs(method)
    arrays = [tok, mask, *pos, *ks, *vs]
    return {spec.name: as_shape(a, spec.shape) for spec, a in zip(method.inputs, arrays)}


def as_shape(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`a` viewed as `shape` (the same bytes: a cache [1,H,..] as a Genie graph's [H,1,..])."""
    return a if a.shape == shape else a.reshape(shape)


def write_positions(layout: LlmLayout, method: MethodLayout, arrays: Sequence[np.ndarray],
                    positions: np.ndarray) -> None:
    """A call's position inputs for its T slots at `positions`: the ids (ExecuTorch's input_pos),
    or each slot's RoPE cos / sin row (a Genie bundle: `layout.rope`)."""
    if layout.rope is None:
        arrays[0][0] = positions
        return
    rows = np.minimum(positions, layout.context_len - 1)
    arrays[0][0, 0] = layout.rope.cos[rows]
    arrays[1][0, 0] = layout.rope.sin[rows]


def window_offsets(T: int, tree: WindowTree | None) -> np.ndarray:
    """Each slot's position less n_past."""
    return np.arange(T, dtype=np.int64) if tree is None else np.asarray(tree.offsets, dtype=np.int64)


def check_call(layout: LlmLayout, method: MethodLayout, n_past: int, n: int, tree: WindowTree | None) -> None:
    """A call of n tokens at n_past fits the window and the method's C - T cache slots: one per
    token, or for a tree only its first slot's (the caller keeps at most the slots left:
    `KVCache.put` checks)."""
    T = method.ar_len
    if not 1 <= n <= T:
        raise InputError(f"{method.name}: {n} tokens for a window of {T}")
    slots = layout.cache_slots(method)
    if n_past + (n if tree is None else 1) > slots:
        raise ContextLengthError(f"{method.name}: {n} tokens at position {n_past} exceed its "
                                 f"{slots} cache slots (context {layout.context_len}, window {T})")


def split_outputs(layout: LlmLayout, method: MethodLayout, outputs) -> tuple[np.ndarray, list, list]:
    """(logits, k_outs, v_outs) from a name->array mapping or a positional sequence; the new
    entries as [1,H,D,T] / [1,H,T,D] whatever the graph's own shape."""
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
    H, D, T = layout.n_kv_heads, layout.head_dim, method.ar_len
    ks = [as_shape(np.asarray(k), (1, H, D, T)) for k in seq[1:1 + L]]
    vs = [as_shape(np.asarray(v), (1, H, T, D)) for v in seq[1 + L:]]
    return np.asarray(seq[0]), ks, vs


def logits_to_float(layout: LlmLayout, logits: np.ndarray) -> np.ndarray:
    if layout.logits_quant is not None:
        return layout.logits_quant.dequantize(logits)
    return np.asarray(logits, dtype=np.float32)

