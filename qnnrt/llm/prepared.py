"""The prepared LLM step: each method's graph call bound once (`Program.prepare`) to persistent
arrays, as ExecuTorch's runner does with its smart-mask KV manager. The KV caches are the graph's
cache inputs in place; tokens, positions and the mask are small buffers written in place; logits
and the new K/V entries land in buffers read in place. A call then costs: write the few small
inputs, run the method, copy the new entries into the cache slots. Nothing is validated, copied
or allocated per call beyond that (`Program.run` checks a dict of inputs and allocates outputs)."""
from __future__ import annotations

import weakref
from typing import Sequence

import numpy as np

from qnnrt.llm.kv_cache import (Alloc, KVCache, WindowTree, as_shape, build_mask, check_call,
                                window_offsets, window_visibility, write_positions)
from qnnrt.llm.layout import LlmLayout, MethodLayout
from qnnrt.runtime.plan import CallerArrays
from qnnrt.runtime.program import PreparedMethod, Program


class StepBuffers:
    """One method's small I/O, persistent: tokens, mask and positions in; logits and the new K/V
    entries out (fused into one array per kind when `fused`, as the caches are)."""

    def __init__(self, alloc: Alloc, layout: LlmLayout, method: MethodLayout, fused: bool) -> None:
        self.method, self.layout = method, layout
        tok, mask = method.inputs[:2]
        self.tokens = alloc(tok.shape, tok.dtype)
        self.mask = alloc(mask.shape, mask.dtype)
        self.pos = [alloc(s.shape, s.dtype) for s in method.position_inputs]
        self.mask[...] = build_mask(method, layout.context_len, 0)
        self.mask_n = 0          # the n_past the mask opens columns for
        self.tree: WindowTree | None = None   # the window layout the mask and positions hold
        L, H, D, T = layout.n_layers, layout.n_kv_heads, layout.head_dim, method.ar_len
        lg, dtype = method.outputs[0], layout.cache_dtype
        self.logits = alloc(lg.shape, lg.dtype)
        self.k_out_all = self.v_out_all = None
        # the runner's [1,H,D,T] / [1,H,T,D]; each graph writes them in its own shape (as_shape)
        if fused:
            self.k_out_all = alloc((L, 1, H, D, T), dtype)
            self.v_out_all = alloc((L, 1, H, T, D), dtype)
            self.k_out, self.v_out = list(self.k_out_all), list(self.v_out_all)
        else:
            self.k_out = [alloc((1, H, D, T), dtype) for _ in range(L)]
            self.v_out = [alloc((1, H, T, D), dtype) for _ in range(L)]

    def caller_arrays(self, cache: KVCache) -> CallerArrays:
        ks, vs = cache.arrays(self.method)
        m = self.method
        ins = {s.name: as_shape(a, s.shape)
               for s, a in zip(m.inputs, [self.tokens, self.mask, *self.pos, *ks, *vs])}
        outs = {s.name: as_shape(a, s.shape)
                for s, a in zip(m.outputs, [self.logits, *self.k_out, *self.v_out])}
        return CallerArrays(ins, outs)

    def write(self, tokens: Sequence[int], n_past: int, pad_token: int, tree: WindowTree | None = None) -> None:
        """The inputs of a call at n_past, as `build_step_inputs` makes them: tokens right-padded,
        positions n_past.. (or n_past + the tree's offsets), the mask's cache columns [0, n_past)
        open (only the columns that changed since the last call are written) and its window
        columns causal or as the tree says (written when the layout changes)."""
        n, T = len(tokens), self.method.ar_len
        rope = self.layout.rope
        if T == 1:
            self.tokens[0, 0] = tokens[0]
            if rope is None:
                self.pos[0][0, 0] = n_past
            else:   # one row each: copied in place, no index array
                self.pos[0][0, 0, 0] = rope.cos[n_past]
                self.pos[1][0, 0, 0] = rope.sin[n_past]
        else:
            self.tokens[0, :n] = tokens
            self.tokens[0, n:] = pad_token
            write_positions(self.layout, self.method, self.pos, n_past + window_offsets(T, tree))
            if tree is not self.tree:
                m, C = self.method, self.layout.context_len
                self.mask[0, 0, :, C - T:] = np.where(window_visibility(m, tree), m.mask_open, m.mask_closed)
                self.tree = tree
        was = self.mask_n
        if n_past > was:
            self.mask[..., was:n_past] = self.method.mask_open
        elif n_past < was:
            self.mask[..., n_past:was] = self.method.mask_closed
        self.mask_n = n_past


class PreparedSteps:
    """The runner's calls through prepared methods: one `StepBuffers` per method, one prepared
    method per (cache, method) bound to that cache's arrays (made on a cache's first call, or by
    `prepare`). `calls` counts the calls per method."""

    def __init__(self, program: Program, layout: LlmLayout, calls: dict[str, int]) -> None:
        self.program, self.layout, self.calls = program, layout, calls
        # one array per kind (one copy writes a token's entries of every layer); in rpcmem each
        # layer's view is registered at its offset in the one block
        self.fused = True
        methods = {layout.prefill.name: layout.prefill, layout.decode.name: layout.decode}
        self.buffers = {n: StepBuffers(program.buffer, layout, m, self.fused)
                        for n, m in methods.items()}
        self._bound: weakref.WeakKeyDictionary[KVCache, dict[str, PreparedMethod]] = \
            weakref.WeakKeyDictionary()

    def new_cache(self) -> KVCache:
        """A cache in the program's buffers (the arena under multi-PD, rpcmem with shared
        buffers), its methods bound now."""
        cache = KVCache(self.layout, alloc=self.program.buffer, fused=self.fused)
        self.prepare(cache)
        return cache

    def prepare(self, cache: KVCache) -> dict[str, PreparedMethod]:
        """Bind every method to `cache`'s arrays (once per cache)."""
        bound = self._bound.get(cache)
        if bound is None:
            bound = {n: self.program.prepare(n, b.caller_arrays(cache))
                     for n, b in self.buffers.items()}
            self._bound[cache] = bound
        return bound

    def forward(self, method: MethodLayout, cache: KVCache, tokens: Sequence[int],
                pad_token: int, tree: WindowTree | None = None) -> np.ndarray:
        """Run `method` on up to T tokens at cache.n_past (laid out by `tree` when given); returns
        the raw logits [1, T, V], a buffer the next call overwrites. The new K/V entries wait in
        the method's buffers for `commit`."""
        p = cache.n_past
        check_call(self.layout, method, p, len(tokens), tree)
        run = self.prepare(cache)[method.name]
        b = self.buffers[method.name]
        cache.sync(method)
        b.write(tokens, p, pad_token, tree)
        self.calls[method.name] = self.calls.get(method.name, 0) + 1
        run.run()
        return b.logits

    def commit(self, method: MethodLayout, cache: KVCache, n: int, slots: Sequence[int] | None = None) -> None:
        """Copy the new entries of the first n tokens (or of window `slots`[:n]) of `method`'s
        last call into the cache slots."""
        b = self.buffers[method.name]
        cache.put(method, b.k_out, b.v_out, n, b.k_out_all, b.v_out_all, slots)
