"""The LLM layout of a Genie bundle (Qualcomm AI Hub's LLM export), beside the ExecuTorch one in
layout.py: the same `LlmLayout`, so one runner, one KV cache and one set of loops serve both.

What the graphs take (qai_hub_models _shared/llm): ``input_ids`` [1, AR] int32, an additive
``attention_mask`` [1, 1, AR, CL] (cache columns [0, CL-AR) then the call's own AR columns),
``position_ids_cos`` / ``position_ids_sin`` [1, 1, AR, rope-dim], ``past_key_<l>_in`` [KVH, 1, D,
CL-AR] and ``past_value_<l>_in`` [KVH, 1, CL-AR, D]; they give ``logits`` [1, AR, V] and the new
entries ``past_key_<l>_out`` [KVH, 1, D, AR], ``past_value_<l>_out`` [KVH, 1, AR, D]. Methods:
``prompt`` (the widest AR) prefills and verifies drafts, ``token`` (AR 1) decodes
(runtime/genie.py). A fixed-point tensor's encoding is the graph's own (its QNN quantization);
the config gives the context size, BOS, stop ids and the RoPE settings."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np

from qnnrt.formats.genie import GenieConfig, SamplerConfig
from qnnrt.llm.errors import LayoutError
from qnnrt.llm.layout import FLOAT_MASK_OPEN, IOTensor, LlmLayout, MethodLayout
from qnnrt.llm.quant import FLOAT_DTYPES, QUANT_DTYPES, QuantParams
from qnnrt.llm.rope import RopeTable
from qnnrt.llm.sampling import SamplingOptions

PROMPT_METHOD = "prompt"
TOKEN_METHOD = "token"
TOKENS, MASK, COS, SIN = "input_ids", "attention_mask", "position_ids_cos", "position_ids_sin"
_K_IN, _V_IN = re.compile(r"past_key_(\d+)_in$"), re.compile(r"past_value_(\d+)_in$")
_K_OUT, _V_OUT = re.compile(r"past_key_(\d+)_out$"), re.compile(r"past_value_(\d+)_out$")
LOGITS = "logits"
GENIE_FLOAT_MASK_CLOSED = -1000.0   # what Genie writes into a float attention mask for a closed column

IOList = Sequence[IOTensor]


def _by_layer(specs: IOList, pattern: re.Pattern[str], where: str) -> list[IOTensor]:
    found = {int(m.group(1)): s for s in specs if (m := pattern.match(s.name))}
    if sorted(found) != list(range(len(found))):
        raise LayoutError(f"{where}: tensors {pattern.pattern} are numbered {sorted(found)}; "
                          f"expected 0..L-1")
    return [found[i] for i in range(len(found))]


def _mask_values(mask: IOTensor, where: str, closed: float) -> tuple[float, float]:
    """(open, closed) as the mask input stores them: 0 / `closed` in float, their codes when
    fixed point (closed: the lowest code)."""
    if mask.dtype in FLOAT_DTYPES:
        return FLOAT_MASK_OPEN, closed
    if mask.dtype in QUANT_DTYPES:
        if mask.quant is None:
            raise LayoutError(f"{where}: {MASK} is {mask.dtype} without a quantization encoding")
        return float(mask.quant.quantize(0.0)), float(mask.quant.qmin or 0)
    raise LayoutError(f"{where}: {MASK} is {mask.dtype}; expected float32/float16 or uint16/uint8")


def _cache_dims(s: IOTensor, kind: str, where: str) -> tuple[int, int, int]:
    """(heads, head_dim, slots) of a k ([H,1,D,S] or [1,H,D,S]) or v ([H,1,S,D] / [1,H,S,D]) tensor."""
    if len(s.shape) != 4 or 1 not in s.shape[:2]:
        raise LayoutError(f"{where}: {s.name} has shape {list(s.shape)}; expected "
                          f"{'[KVH, 1, D, S]' if kind == 'k' else '[KVH, 1, S, D]'}")
    h = s.shape[0] * s.shape[1]
    return (h, s.shape[2], s.shape[3]) if kind == "k" else (h, s.shape[3], s.shape[2])


def method_layout(name: str, inputs: IOList, outputs: IOList, mask_closed: float,
                  adapter_names: frozenset[str] = frozenset()) -> tuple[MethodLayout, int]:
    """One variant in the runner's order (MethodLayout); also its number of layers. Inputs named in
    ``adapter_names`` (a converted bundle's LoRA inputs) are the method's `adapter_inputs`."""
    where = f"Genie method {name!r}"
    by_name = {s.name: s for s in inputs}
    missing = [n for n in (TOKENS, MASK, COS, SIN) if n not in by_name]
    if TOKENS in missing and "inputs_embeds" in by_name:
        raise LayoutError(f"{where}: takes inputs_embeds, not input_ids; qnnrt runs bundles whose "
                          f"first part embeds the tokens (input_ids in)")
    if missing:
        raise LayoutError(f"{where}: inputs {missing} missing (it has {sorted(by_name)}); a Genie LLM "
                          f"takes {TOKENS}, {MASK}, {COS}, {SIN} and past_key/value_<l>_in")
    k_in, v_in = _by_layer(inputs, _K_IN, where), _by_layer(inputs, _V_IN, where)
    out_by = {s.name: s for s in outputs}
    if LOGITS not in out_by:
        raise LayoutError(f"{where}: no {LOGITS!r} output (outputs: {sorted(out_by)[:8]})")
    k_out, v_out = _by_layer(outputs, _K_OUT, where), _by_layer(outputs, _V_OUT, where)
    L = len(k_in)
    if not (L == len(v_in) == len(k_out) == len(v_out)) or L == 0:
        raise LayoutError(f"{where}: {len(k_in)} past_key inputs, {len(v_in)} past_value inputs, "
                          f"{len(k_out)} / {len(v_out)} outputs; expected L of each, L >= 1")
    known = {TOKENS, MASK, COS, SIN, *(s.name for s in k_in + v_in)}
    adapters = tuple(s for s in inputs if s.name in adapter_names)
    extra = [s.name for s in inputs if s.name not in known and s.name not in adapter_names]
    if extra:
        raise LayoutError(f"{where}: inputs {extra[:5]} are not the LLM's (tokens, mask, RoPE, KV)")
    tok, mask = by_name[TOKENS], by_name[MASK]
    if len(tok.shape) != 2 or tok.shape[0] != 1 or tok.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise LayoutError(f"{where}: {TOKENS} is {tok.dtype}{list(tok.shape)}; expected int32[1, AR]")
    T = tok.shape[1]
    if len(mask.shape) != 4 or mask.shape[:3] != (1, 1, T):
        raise LayoutError(f"{where}: {MASK} has shape {list(mask.shape)}; expected [1, 1, {T}, CL]")
    for p in (by_name[COS], by_name[SIN]):
        if len(p.shape) != 4 or p.shape[:3] != (1, 1, T):
            raise LayoutError(f"{where}: {p.name} has shape {list(p.shape)}; expected [1, 1, {T}, rope-dim]")
    m_open, m_closed = _mask_values(mask, where, mask_closed)
    ordered_in = (tok, mask, by_name[COS], by_name[SIN], *k_in, *v_in)
    ordered_out = (out_by[LOGITS], *k_out, *v_out)
    return MethodLayout(name, T, ordered_in, ordered_out, tok.dtype, mask.dtype, m_open, m_closed,
                        n_positions=2, adapter_inputs=adapters), L


def _check_caches(m: MethodLayout, L: int, C: int) -> tuple[int, int, np.dtype]:
    """(KVH, D, cache dtype) of a method, every cache tensor checked against them."""
    T = m.ar_len
    where = f"Genie method {m.name!r}"
    ks, vs = m.cache_inputs[:L], m.cache_inputs[L:]
    k_out, v_out = m.outputs[1:1 + L], m.outputs[1 + L:]
    H, D, _ = _cache_dims(ks[0], "k", where)
    dtype = ks[0].dtype
    for group, kind, slots in ((ks, "k", C - T), (vs, "v", C - T), (k_out, "k", T), (v_out, "v", T)):
        for s in group:
            if _cache_dims(s, kind, where) != (H, D, slots) or s.dtype != dtype:
                raise LayoutError(f"{where}: {s.name} is {s.dtype}{list(s.shape)}; expected {dtype} with "
                                  f"{H} heads, head dim {D} and {slots} slots (CL {C}, AR {T})")
    for a, b in zip(ks + vs, k_out + v_out):
        if a.quant != b.quant:
            raise LayoutError(f"{where}: {a.name} and {b.name} have different encodings ({a.quant} vs "
                              f"{b.quant}); the new entries are copied into the cache as they are")
    return H, D, dtype


def genie_layout(config: GenieConfig, methods: Mapping[str, tuple[IOList, IOList]], *,
                 mask_closed: float = GENIE_FLOAT_MASK_CLOSED,
                 adapter_names: frozenset[str] = frozenset()) -> LlmLayout:
    """Build and validate the layout from the config and the variants' I/O (``adapter_names``:
    the LoRA inputs the bundle's record declares)."""
    if TOKEN_METHOD not in methods:
        raise LayoutError(f"{config.config_path}: no token graph (AR 1) among the bundle's graphs "
                          f"(variants: {sorted(methods)}); Genie decodes with one")
    dec, L = method_layout(TOKEN_METHOD, *methods[TOKEN_METHOD], mask_closed, adapter_names)
    pre = dec
    if PROMPT_METHOD in methods:
        pre, L2 = method_layout(PROMPT_METHOD, *methods[PROMPT_METHOD], mask_closed, adapter_names)
        if L2 != L:
            raise LayoutError(f"the prompt graphs have {L2} layers of KV, the token graphs {L}")
        if set(pre.adapter_inputs) != set(dec.adapter_inputs):
            raise LayoutError("the prompt and token graphs take different LoRA inputs (names, shapes or "
                              "dtypes); one adapter's arrays must serve both")
    C = dec.inputs[1].shape[3]
    if pre.inputs[1].shape[3] != C:
        raise LayoutError(f"context length differs: prompt {pre.inputs[1].shape[3]}, token {C}")
    H, D, cache_dtype = _check_caches(dec, L, C)
    if pre is not dec and _check_caches(pre, L, C) != (H, D, cache_dtype):
        raise LayoutError("the prompt and token graphs' caches differ in heads, head dim or dtype")
    logits = dec.outputs[0]
    if len(logits.shape) != 3 or logits.shape[:2] != (1, 1):
        raise LayoutError(f"token method: {LOGITS} has shape {list(logits.shape)}; expected [1, 1, V]")
    V = logits.shape[2]
    if pre.outputs[0].shape != (1, pre.ar_len, V) or pre.outputs[0].dtype != logits.dtype:
        raise LayoutError(f"prompt method: {LOGITS} is {pre.outputs[0].dtype}{list(pre.outputs[0].shape)}; "
                          f"expected {logits.dtype}[1, {pre.ar_len}, {V}]")
    ctx = config.context
    for what, ids in (("bos-token", [ctx.bos]), ("eos-token", ctx.eos), ("eot-token", [ctx.eot])):
        bad = [t for t in ids if t is not None and t >= V]
        if bad:
            raise LayoutError(f"{config.config_path}: dialog.context.{what} {bad[0]} is not below the graphs' "
                              f"{V} logits; correct the config")
    if ctx.size > C:
        raise LayoutError(f"{config.config_path}: dialog.context.size is {ctx.size} but the graphs "
                          f"hold {C} positions (attention_mask's CL); give at most {C}")
    logits_quant = logits.quant if logits.dtype in QUANT_DTYPES else None
    if logits.dtype in QUANT_DTYPES and logits_quant is None:
        raise LayoutError(f"{LOGITS} is {logits.dtype} without a quantization encoding")
    kq: list[QuantParams | None] = [s.quant for s in dec.cache_inputs[:L]]
    vq: list[QuantParams | None] = [s.quant for s in dec.cache_inputs[L:]]
    if cache_dtype in QUANT_DTYPES and None in kq + vq:
        raise LayoutError(f"the KV caches are {cache_dtype} without quantization encodings")
    rope = _rope_table(config, dec, C)
    return LlmLayout(mode="hybrid" if pre is not dec else "kv", prefill=pre, decode=dec, n_layers=L,
                     n_kv_heads=int(H), head_dim=int(D), context_len=int(C), vocab_size=int(V),
                     cache_dtype=np.dtype(cache_dtype), logits_dtype=np.dtype(logits.dtype),
                     logits_quant=logits_quant, k_quant=tuple(kq), v_quant=tuple(vq),
                     eos_ids=stop_ids(config), bos_id=ctx.bos, n_bos=0 if ctx.bos is None else 1,
                     max_seq_len=ctx.size, kv_io_bit_width=None, rope=rope, seq_limit=ctx.size,
                     fill_zero_point=True)


def _rope_table(config: GenieConfig, m: MethodLayout, C: int) -> RopeTable:
    cos, sin = m.position_inputs
    if config.rope is None:
        raise LayoutError(f"{config.config_path}: the graphs take {COS} / {SIN} but the config has no "
                          f"RoPE settings (engine.model.positional-encoding, or QnnHtp rope-theta and "
                          f"pos-id-dim); add them")
    if config.rope.dim != cos.shape[3]:
        raise LayoutError(f"{config.config_path}: rope-dim is {config.rope.dim} but {COS} has "
                          f"{cos.shape[3]} columns; give rope-dim {cos.shape[3]} (head_dim / 2)")
    if cos.dtype != sin.dtype:
        raise LayoutError(f"{COS} is {cos.dtype} and {SIN} {sin.dtype}; expected one dtype")
    return RopeTable.build(config.rope, C, cos.dtype, cos.quant, sin.quant, context=config.context.size)


def stop_ids(config: GenieConfig) -> frozenset[int]:
    """eos-token and eot-token: Genie ends a generation at either (and emits neither)."""
    ctx = config.context
    return frozenset([*ctx.eos, *([ctx.eot] if ctx.eot is not None else [])])


def _greedy(s: SamplerConfig) -> bool:
    """Genie takes the argmax at temp 0 or top-k 1 (and then applies no token penalty)."""
    return s.temperature == 0 or s.top_k == 1


def genie_sampling(config: GenieConfig) -> SamplingOptions:
    """The config's sampler as Genie reads it (measured with libGenie.so, docs/genie.md): temp,
    top-k, top-p (``greedy`` does not change them); the token penalty over the last
    ``penalize-last-n`` tokens, prompt included, only where Genie samples (none at 0)."""
    s, pen = config.sampler, config.sampler.penalty
    options = SamplingOptions(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, seed=s.seed)
    if pen is None or pen.last_n == 0 or _greedy(s):
        return options
    return replace(options, repetition_penalty=pen.repetition, presence_penalty=pen.presence,
                   frequency_penalty=pen.frequency, penalty_last_n=pen.last_n)


def genie_notes(config: GenieConfig, vocab_size: int) -> list[str]:
    """What of the config Genie (and so qnnrt) leaves unused, and where qnnrt differs: one line each."""
    s, ctx = config.sampler, config.context
    notes = []
    if ctx.n_vocab != vocab_size:
        notes.append(f"n-vocab {ctx.n_vocab} is not the logits' {vocab_size}: both sample over the logits")
    if s.greedy and not _greedy(s):
        notes.append(f"greedy: true is unused: Genie samples at temp {s.temperature:g}, top-k {s.top_k} "
                     f"(so does qnnrt)")
    if s.penalty is not None and (s.penalty.last_n == 0 or _greedy(s)):
        notes.append("token-penalty is unused: " + ("penalize-last-n is 0" if s.penalty.last_n == 0
                                                    else "Genie applies none when it takes the argmax"))
    if s.penalty is not None and (s.penalty.presence or s.penalty.frequency) and s.penalty.last_n and not _greedy(s):
        notes.append("presence / frequency penalties: qnnrt applies them as OpenAI defines them (Genie 2.51 "
                     "samples the last vocabulary id at every step with them)")
    if s.seed is not None and not _greedy(s):
        notes.append(f"seed {s.seed}: qnnrt's random stream is not Genie's (the same seed samples other tokens)")
    if ctx.bos is not None:
        notes.append(f"BOS {ctx.bos}: Genie prepends it to every query, even one beginning with it; qnnrt to a "
                     f"text prompt not beginning with it, to --prompt-tokens with --add-bos")
    if config.rope is not None and config.rope.note:
        notes.append(config.rope.note)
    if config.stop_sequences:
        notes.append("stop-sequence applies to text prompts (qnnrt llm --prompt, serve); with token ids "
                     "neither Genie (tokenQuery) nor qnnrt applies it")
    return notes
