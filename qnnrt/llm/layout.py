"""The layout of an ExecuTorch Qualcomm LLM program (examples/qualcomm/oss_scripts/llama), read
from its constant methods and its methods' I/O: hybrid (``prefill_forward`` AR-T + ``kv_forward``
AR-1) or kv-only; smart-mask KV caches (k [1,H,D,C-T], v [1,H,C-T,D], new entries out only).
The conventions and where they come from: docs/design.md, "LLM runner"."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from qnnrt.llm.errors import LayoutError
from qnnrt.llm.quant import FLOAT_DTYPES as _FLOAT_DTYPES
from qnnrt.llm.quant import QUANT_DTYPES as _QUANT_DTYPES
from qnnrt.llm.quant import QuantParams, parse_quant_attr

if TYPE_CHECKING:
    from qnnrt.llm.rope import RopeTable

PREFILL_METHOD = "prefill_forward"
DECODE_METHOD = "kv_forward"
FLOAT_MASK_OPEN = 0.0
FLOAT_MASK_CLOSED = -255.0          # masking_utils.PADDING_MASK_VALUE; ExecuTorch's C++ runner: -65535.0
QUANT_MASK_OPEN = {np.dtype(np.uint16): 65535, np.dtype(np.uint8): 255}
QUANT_MASK_CLOSED = 0


@dataclass(frozen=True)
class IOTensor:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    quant: QuantParams | None = None     # a fixed-point tensor's encoding, where the graph says it

    @staticmethod
    def of(x) -> "IOTensor":
        if isinstance(x, IOTensor):
            return x
        if isinstance(x, Mapping):
            return IOTensor(str(x["name"]), tuple(int(d) for d in x["shape"]), np.dtype(x["dtype"]),
                            x.get("quant"))
        name, shape, dtype = x[:3]
        return IOTensor(str(name), tuple(int(d) for d in shape), np.dtype(dtype),
                        x[3] if len(x) > 3 else None)


@dataclass(frozen=True)
class MethodLayout:
    """One method in the runner's order: inputs (tokens, mask, the position input(s), L k caches,
    L v caches), outputs (logits, L k, L v). Positions are ids (ExecuTorch's input_pos: one input)
    or RoPE cos / sin rows computed on the host (a Genie bundle: two inputs, `LlmLayout.rope`).
    Cache tensors may be [1,H,..] (ExecuTorch) or [H,1,..] (Genie): the same bytes, so the runner
    keeps [1,H,..] and hands each graph its own shape (`as_shape`)."""
    name: str
    ar_len: int                       # T
    inputs: tuple[IOTensor, ...]
    outputs: tuple[IOTensor, ...]
    token_dtype: np.dtype
    mask_dtype: np.dtype
    mask_open: float
    mask_closed: float
    n_positions: int = 1              # 1: position ids; 2: RoPE cos, sin
    adapter_inputs: tuple[IOTensor, ...] = ()   # LoRA inputs bound per adapter (llm/lora.py), not per call

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    @property
    def position_inputs(self) -> tuple[IOTensor, ...]:
        return self.inputs[2:2 + self.n_positions]

    @property
    def cache_inputs(self) -> tuple[IOTensor, ...]:
        return self.inputs[2 + self.n_positions:]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.outputs]


def _const(constants: Mapping[str, Any], name: str, default=None):
    v = constants.get(name, default)
    if isinstance(v, (list, tuple)) and len(v) == 1:
        v = v[0]
    if isinstance(v, np.ndarray) and v.size == 1:
        v = v.item()
    return v


_ET_IN = [re.compile(r"tokens?$|input_ids$"), re.compile(r"atten(tion)?_mask$"), re.compile(r"input_pos$|pos_ids$")]


@dataclass(frozen=True)
class LlmLayout:
    mode: str                          # "hybrid", "kv" or "lookahead" (a decode method of T > 1 slots)
    prefill: MethodLayout              # the method that processes prompts (kv_forward in kv mode)
    decode: MethodLayout
    n_layers: int
    n_kv_heads: int
    head_dim: int
    context_len: int                   # C
    vocab_size: int                    # from the logits shape (what ExecuTorch uses)
    cache_dtype: np.dtype
    logits_dtype: np.dtype
    logits_quant: QuantParams | None
    k_quant: tuple[QuantParams | None, ...]
    v_quant: tuple[QuantParams | None, ...]
    eos_ids: frozenset[int]
    bos_id: int | None
    n_bos: int
    max_seq_len: int
    kv_io_bit_width: int | None        # as declared (NOT reliable: the fp16 fixture says 8)
    constants: Mapping[str, Any] = field(default_factory=dict, repr=False)
    rope: RopeTable | None = field(default=None, repr=False)   # RoPE rows when positions are cos / sin
    seq_limit: int | None = None       # a sequence limit below the graphs' (a Genie config's context size)
    fill_zero_point: bool = False      # never-written cache slots hold 0.0 (a quantized cache: its zero
    #                                    point, as Genie clears it); False: byte 0 (ExecuTorch's runner)

    @property
    def max_cache_len(self) -> int:
        return self.context_len - min(self.prefill.ar_len, self.decode.ar_len)

    def cache_slots(self, method: MethodLayout) -> int:
        """The cache entries `method` reads (its cache inputs): C - T."""
        return self.context_len - method.ar_len

    @property
    def decode_limit(self) -> int:
        """The longest sequence decoding reaches: the token at position p is decoded with p cache
        entries, and the decode method holds C - T of them (ExecuTorch stops at pos > C - T); or
        the configured sequence limit, when lower."""
        limit = self.cache_slots(self.decode) + 1
        return limit if self.seq_limit is None else min(limit, self.seq_limit)

    @property
    def prompt_capacity(self) -> int:
        """Max n_past + prompt tokens the prompt processor can take (ExecuTorch: C - T_prefill)."""
        return self.cache_slots(self.prefill)

    @property
    def quantized(self) -> bool:
        return self.logits_quant is not None or self.cache_dtype in _QUANT_DTYPES

    def method(self, name: str) -> MethodLayout:
        for m in (self.prefill, self.decode):
            if m.name == name:
                return m
        raise KeyError(name)

    def describe(self) -> dict:
        return {"mode": self.mode, "prefill_method": self.prefill.name, "prefill_ar_len": self.prefill.ar_len,
                "decode_method": self.decode.name, "decode_ar_len": self.decode.ar_len,
                "n_layers": self.n_layers, "n_kv_heads": self.n_kv_heads,
                "head_dim": self.head_dim, "context_len": self.context_len, "vocab_size": self.vocab_size,
                "cache_dtype": self.cache_dtype.name, "logits_dtype": self.logits_dtype.name,
                "mask_dtype": self.decode.mask_dtype.name, "token_dtype": self.decode.token_dtype.name,
                "logits_quant": None if self.logits_quant is None else
                [self.logits_quant.scale, self.logits_quant.zero_point],
                "eos_ids": sorted(self.eos_ids), "bos_id": self.bos_id, "max_seq_len": self.max_seq_len,
                "prompt_capacity": self.prompt_capacity,
                "positions": "rope" if self.rope is not None else "ids",
                "cache_fill": "zero point" if self.fill_zero_point else "0"}

    def cache_fill(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(k, v) per layer: what a never-written cache slot holds (the stored code)."""
        def zp(qs: tuple[QuantParams | None, ...], layer: int) -> int:
            q = qs[layer] if layer < len(qs) else None
            return int(q.zero_point) if self.fill_zero_point and q is not None else 0
        L = range(self.n_layers)
        return tuple(zp(self.k_quant, i) for i in L), tuple(zp(self.v_quant, i) for i in L)

    # --------------------------------------------------------------------------------------------
    @classmethod
    def from_program(cls, constants: Mapping[str, Any], methods: Mapping[str, Any], *,
                     float_mask_closed: float = FLOAT_MASK_CLOSED) -> "LlmLayout":
        """Build and validate the layout.

        constants: constant-method name -> value (``get_n_layers`` -> 4, ...).
        methods: method name -> (inputs, outputs), each a sequence of IOTensor / (name, shape, dtype)
        / {"name", "shape", "dtype"}; or an object with ``inputs`` / ``outputs`` attributes.
        """
        def io(m):
            if hasattr(m, "inputs") and hasattr(m, "outputs"):
                ins, outs = m.inputs, m.outputs
            elif isinstance(m, Mapping):
                ins, outs = m["inputs"], m["outputs"]
            else:
                ins, outs = m
            return tuple(IOTensor.of(s) for s in ins), tuple(IOTensor.of(s) for s in outs)

        if DECODE_METHOD not in methods:
            raise LayoutError(f"not an ExecuTorch Qualcomm LLM program: no '{DECODE_METHOD}' method "
                              f"(methods: {', '.join(sorted(methods)) or 'none'})")
        n_layers = _const(constants, "get_n_layers")
        if n_layers is None:
            raise LayoutError("not an ExecuTorch Qualcomm LLM program: no 'get_n_layers' constant method")
        n_layers = int(n_layers)
        if "get_n_self_layers" in constants:
            raise LayoutError("this program has 'get_n_self_layers' (YOCO cross-decoder layers, Gemma 4): "
                              "not supported")
        if _const(constants, "get_use_kv_cache", True) in (False, 0):
            raise LayoutError("get_use_kv_cache is false: a program without KV-cache I/O is not supported")
        for k in ("get_sink_size", "get_eviction_batch_size"):
            if k in constants:
                raise LayoutError(f"this program has '{k}' (attention-sink eviction): not supported")

        def method(name: str) -> MethodLayout:
            ins, outs = io(methods[name])
            want_in, want_out = 3 + 2 * n_layers, 1 + 2 * n_layers
            if len(ins) == 4 + 2 * n_layers:
                raise LayoutError(f"{name}: {len(ins)} inputs = tokens, atten_mask, window_atten_mask, input_pos "
                                  f"and caches (sliding-window hybrid cache): not supported")
            if len(ins) != want_in or len(outs) != want_out:
                raise LayoutError(f"{name}: expected {want_in} inputs (tokens, atten_mask, input_pos, {n_layers} "
                                  f"k caches, {n_layers} v caches) and {want_out} outputs (logits, {n_layers} k, "
                                  f"{n_layers} v) for get_n_layers={n_layers}; got {len(ins)} and {len(outs)}")
            for i, pat in enumerate(_ET_IN):
                nm = ins[i].name
                if not re.match(r"input_?\d+$", nm) and not pat.search(nm):
                    raise LayoutError(f"{name}: input {i} is named {nm!r}; expected "
                                      f"{['tokens', 'atten_mask', 'input_pos'][i]} at this position")
            tok, mask, pos = ins[0], ins[1], ins[2]
            if len(tok.shape) != 2 or tok.shape[0] != 1:
                raise LayoutError(f"{name}: tokens input {tok.name} has shape {list(tok.shape)}; expected [1, T] "
                                  f"(batch 1)")
            T = tok.shape[1]
            if tok.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
                raise LayoutError(f"{name}: tokens input is {tok.dtype}; expected int32 or int64 token ids "
                                  f"(an embeddings-input program is not supported)")
            if len(mask.shape) != 4 or mask.shape[:3] != (1, 1, T):
                raise LayoutError(f"{name}: atten_mask {mask.name} has shape {list(mask.shape)}; "
                                  f"expected [1, 1, {T}, C]")
            C = mask.shape[3]
            if pos.shape != (1, T) or pos.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
                raise LayoutError(f"{name}: input_pos {pos.name} is {pos.dtype}{list(pos.shape)}; "
                                  f"expected int32[1, {T}]")
            if mask.dtype in QUANT_MASK_OPEN:
                m_open, m_closed = float(QUANT_MASK_OPEN[mask.dtype]), float(QUANT_MASK_CLOSED)
            elif mask.dtype in _FLOAT_DTYPES:
                m_open, m_closed = FLOAT_MASK_OPEN, float_mask_closed
            else:
                raise LayoutError(f"{name}: atten_mask dtype {mask.dtype} not supported "
                                  f"(float32/float16/uint16/uint8)")
            if T >= C:
                raise LayoutError(f"{name}: AR length {T} >= context length {C} (no KV cache inputs): not supported")
            return MethodLayout(name, T, ins, outs, tok.dtype, mask.dtype, m_open, m_closed)

        dec = method(DECODE_METHOD)
        if PREFILL_METHOD in methods:
            mode, pre = "hybrid", method(PREFILL_METHOD)
        else:
            mode, pre = "kv", dec
        if dec.ar_len != 1:
            if mode != "hybrid":
                raise LayoutError(f"{DECODE_METHOD} takes {dec.ar_len} tokens per call and there is no "
                                  f"{PREFILL_METHOD}: a kv-only file decodes one token per call")
            mode = "lookahead"     # ExecuTorch's --model_mode lookahead: a decode window of T slots
        C = dec.inputs[1].shape[3]
        if pre.inputs[1].shape[3] != C:
            raise LayoutError(f"context length differs between {pre.name} ({pre.inputs[1].shape[3]}) and "
                              f"{dec.name} ({C})")
        ctx_const = _const(constants, "get_max_context_len", _const(constants, "get_max_seq_len"))
        if ctx_const is not None and int(ctx_const) != C:
            raise LayoutError(f"get_max_context_len={ctx_const} but the attention masks have {C} columns")

        L = n_layers
        H = D = V = None
        cache_dtype = None
        for m in {pre.name: pre, dec.name: dec}.values():
            T, ins, outs = m.ar_len, m.inputs, m.outputs
            k_in, v_in, k_out, v_out = ins[3:3 + L], ins[3 + L:], outs[1:1 + L], outs[1 + L:]
            logits = outs[0]
            if len(logits.shape) != 3 or logits.shape[:2] != (1, T):
                raise LayoutError(f"{m.name}: output 0 ({logits.name}) has shape {list(logits.shape)}; expected logits "
                                  f"[1, {T}, vocab]")
            if V is None:
                V = logits.shape[2]
            elif logits.shape[2] != V:
                raise LayoutError(f"vocab differs between methods ({V} vs {logits.shape[2]})")
            for l in range(L):
                for spec, what in ((k_in[l], "k cache input"), (v_in[l], "v cache input"),
                                   (k_out[l], "k cache output"), (v_out[l], "v cache output")):
                    if len(spec.shape) != 4 or spec.shape[0] != 1:
                        raise LayoutError(f"{m.name}: {what} {l} ({spec.name}) has shape "
                                          f"{list(spec.shape)}; expected 4-d, batch 1")
                if H is None:
                    H, D = k_out[l].shape[1], k_out[l].shape[2]
                exp = {"k cache input": (1, H, D, C - T), "v cache input": (1, H, C - T, D),
                       "k cache output": (1, H, D, T), "v cache output": (1, H, T, D)}
                for spec, what in ((k_in[l], "k cache input"), (v_in[l], "v cache input"),
                                   (k_out[l], "k cache output"), (v_out[l], "v cache output")):
                    if spec.shape != exp[what]:
                        raise LayoutError(f"{m.name}: {what} {l} ({spec.name}) has shape {list(spec.shape)}; expected "
                                          f"{list(exp[what])} (smart-mask layout: k [1,H,D,C-T], v [1,H,C-T,D], "
                                          f"new entries only)")
                    if cache_dtype is None:
                        cache_dtype = spec.dtype
                    elif spec.dtype != cache_dtype:
                        raise LayoutError(f"{m.name}: {what} {l} is {spec.dtype}, other caches are {cache_dtype} "
                                          f"(mixed cache dtypes are not supported)")
        if pre.mask_dtype != dec.mask_dtype or pre.token_dtype != dec.token_dtype:
            raise LayoutError("mask / token dtypes differ between the prefill and decode methods")
        logits_dtype = dec.outputs[0].dtype
        if pre.outputs[0].dtype != logits_dtype:
            raise LayoutError("logits dtypes differ between methods")
        if cache_dtype not in _FLOAT_DTYPES + _QUANT_DTYPES:
            raise LayoutError(f"cache dtype {cache_dtype} not supported")

        logits_quant = None
        if logits_dtype in _QUANT_DTYPES:
            s, z = _const(constants, "get_logits_scale"), _const(constants, "get_logits_zero_point")
            if s is None or z is None:
                raise LayoutError(f"logits are {logits_dtype} but the program has no get_logits_scale / "
                                  f"get_logits_zero_point constant methods to dequantize them")
            logits_quant = QuantParams(float(s), int(z), logits_dtype)
        elif logits_dtype not in _FLOAT_DTYPES:
            raise LayoutError(f"logits dtype {logits_dtype} not supported")

        kq: list[QuantParams | None] = [None] * L
        vq: list[QuantParams | None] = [None] * L
        if cache_dtype in _QUANT_DTYPES:
            for i in range(2 * L):
                a = constants.get(f"get_kv_output_{i}_quant_attr")
                if a is not None:
                    p = parse_quant_attr(a, cache_dtype)
                    (kq if i < L else vq)[i % L] = p

        eos = _const(constants, "get_eos_id")
        eos_ids = frozenset() if eos is None else frozenset(int(e) for e in np.atleast_1d(eos))
        bos = _const(constants, "get_bos_id")
        seq = _const(constants, "get_max_seq_len", C)
        bw = _const(constants, "get_kv_io_bit_width")
        assert H is not None and D is not None and V is not None
        return cls(mode=mode, prefill=pre, decode=dec, n_layers=L, n_kv_heads=int(H), head_dim=int(D),
                   context_len=int(C), vocab_size=int(V), cache_dtype=np.dtype(cache_dtype),
                   logits_dtype=np.dtype(logits_dtype), logits_quant=logits_quant, k_quant=tuple(kq),
                   v_quant=tuple(vq), eos_ids=eos_ids, bos_id=None if bos is None else int(bos),
                   n_bos=int(_const(constants, "get_n_bos", 1)), max_seq_len=int(seq),
                   kv_io_bit_width=None if bw is None else int(bw), constants=dict(constants))

