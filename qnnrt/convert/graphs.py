"""The ONNX graphs of a bundle's parts, with the tensor names, shapes and KV layout Qualcomm AI
Hub's Genie exports use (so qnnrt's Genie loader and libGenie.so run them):

    part 1 also        input_ids [1,N] int32 -> the embedding (Gather)
    every part         the previous part's hidden state [1,N,H] (part 1: the embedding),
                       attention_mask [1,1,N,CL] (additive: 0 attends, -1000 not),
                       position_ids_cos / _sin [1,1,N,D/2], past_key_L_in [KVH,1,D,CL-N],
                       past_value_L_in [KVH,1,CL-N,D] -> past_key_L_out [KVH,1,D,N],
                       past_value_L_out [KVH,1,N,D] and its hidden state
    the last part also -> logits [1,N,V] (final norm, lm head)

Genie fills the cache and the mask; the graph concatenates past (CL-N columns) and new (N) entries.
Weights come layer by layer from the source; with an ExternalWeights store they go to its file as they
are made, so at most one tensor of them is in memory at a time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qnnrt.compiler.external import ExternalWeights
from qnnrt.convert.spec import ModelSpec
from qnnrt.llm.genie_layout import GENIE_FLOAT_MASK_CLOSED

# (graph, x, x @ W, layer, canonical weight key, the projection's scale) -> the output with the LoRA term
LoraHook = Callable[["_Graph", str, str, int, str, float], str]
MASKED = GENIE_FLOAT_MASK_CLOSED      # what Genie writes into a float attention mask for a column not to attend
EMBED = "_model_model_embed_tokens_Gather_Gather_output_0"     # the embedding (AI Hub's name)


@dataclass(frozen=True)
class PartPlan:
    """Which decoder layers each part holds (0-based, [first, stop))."""
    context: int
    bounds: tuple[tuple[int, int], ...]

    @property
    def parts(self) -> int:
        return len(self.bounds)

    def hidden_name(self, part: int) -> str:
        """The hidden state part ``part`` (1-based) writes: AI Hub's name of the last layer's Add so
        far (the embedding while no layer has run: a part of no layers passes on what it got)."""
        stop = self.bounds[part - 1][1]
        return f"_model_model_layers_{stop - 1}_Add_1_output_0" if stop else EMBED

    def graph_name(self, kind: str, ar: int, part: int) -> str:
        return f"{kind}_ar{ar}_cl{self.context}_{part}_of_{self.parts}"


def split_layers(layers: int, parts: int) -> tuple[tuple[int, int], ...]:
    """``layers`` in ``parts`` contiguous groups, the larger ones first."""
    base, extra = divmod(layers, parts)
    out, at = [], 0
    for p in range(parts):
        n = base + (p < extra)
        out.append((at, at + n))
        at += n
    return tuple(out)


class _Graph:
    """Helpers over onnx.helper so a part reads as the math it computes."""

    def __init__(self, prefix: str, prescale: bool = False, store: ExternalWeights | None = None) -> None:
        self.prescale = prescale      # RMSNorm safe from fp16 overflow and uint16 rounding (see rms)
        self.store = store            # where the weights go (else into the model)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.prefix, self.n = prefix, 0

    def input(self, name: str, shape: list[int], dtype: int = TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, dtype, shape))
        return name

    def output(self, value: str, name: str, shape: list[int]) -> None:
        self.op("Identity", value, out=name)
        self.outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))

    def const(self, array: np.ndarray) -> str:
        name = f"{self.prefix}_c{len(self.inits)}"
        self.inits.append(self.store.tensor(name, array) if self.store is not None
                          else numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, kind: str, *inputs: str, out: str | None = None, **attrs) -> str:
        self.n += 1
        out = out or f"{self.prefix}_{kind}_{self.n}"
        self.nodes.append(helper.make_node(kind, list(inputs), [out], name=f"{self.prefix}_{kind}_n{self.n}",
                                           **attrs))
        return out

    def reshape(self, x: str, shape: list[int]) -> str:
        return self.op("Reshape", x, self.const(np.asarray(shape, np.int64)))

    def linear(self, x: str, weight: np.ndarray, bias: np.ndarray | None = None, scale: float = 1.0) -> str:
        w = weight.astype(np.float32) * np.float32(scale) if scale != 1.0 else weight.astype(np.float32)
        y = self.op("MatMul", x, self.const(w))
        if bias is not None:
            y = self.op("Add", y, self.const((bias * scale).astype(np.float32)))
        return y

    def rms(self, x: str, weight: np.ndarray, eps: float) -> str:
        """x / sqrt(mean(x^2) + eps) * weight. Prescaled (every graph qnnrt convert writes, fp16 or
        quantized), x is divided by its row's max |x| first: the same value (eps divided by max |x| twice
        too), but the squares stay in [0, 1] however large the activations (SmolLM2's residual stream
        reaches 25,000 at an attention sink). In fp16 the plain squares overflow; in a quantized graph
        (uint16, one range per tensor) the sink's 6e8 sets the range of x * x and every other token's
        squares round to 0 (SmolLM2 w8a16: perplexity 45,708, not 18.6). The plain form is the test
        fixtures' (their committed bundles)."""
        if not self.prescale:
            ms = self.op("ReduceMean", self.op("Mul", x, x), axes=[-1], keepdims=1)
            inv = self.op("Reciprocal", self.op("Sqrt", self.op("Add", ms, self.const(np.array([eps], np.float32)))))
            return self.op("Mul", self.op("Mul", x, inv), self.const(weight.astype(np.float32)))
        tiny = self.const(np.array([1e-4], np.float32))
        m = self.op("Add", self.op("ReduceMax", self.op("Abs", x), axes=[-1], keepdims=1), tiny)
        # x / sqrt(m) / sqrt(m), never x * (1 / m): 1 / 24,926 is below fp16's smallest normal number, which
        # the HTP flushes to zero (the sink token's massive channel became 0 and SmolLM2 drifted)
        root = self.op("Sqrt", m)
        xs = self.op("Div", self.op("Div", x, root), root)
        ms = self.op("ReduceMean", self.op("Mul", xs, xs), axes=[-1], keepdims=1)
        # eps / m / m, never eps / (m * m): m * m passes fp16's range for m > 256, and the HTP's
        # division by that overflowed product was measured at ~1.0 (SmolLM2's layers 25-29 wrong)
        e = self.op("Div", self.op("Div", self.op("Div", self.const(np.array([eps], np.float32)), m), root), root)
        # xs / sqrt(.), never xs * Reciprocal(sqrt(.)): the HTP's uint16 Reciprocal was measured at about
        # half the true value (w8a16 diverged from the first token); its uint16 Div is right
        normed = self.op("Div", xs, self.op("Sqrt", self.op("Add", ms, e)))
        return self.op("Mul", normed, self.const(weight.astype(np.float32)))

    def model(self) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, self.prefix, self.inputs, self.outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="qnnrt-convert")
        m.ir_version = 9
        return m


class _Layer:
    """One decoder layer's nodes (the shared RoPE, mask and cache-validity tensors given)."""

    def __init__(self, g: _Graph, spec: ModelSpec, n: int, cl: int, rope: tuple[str, str, str],
                 attended: tuple[str, str] | None, lora: LoraHook | None = None) -> None:
        self.g, self.spec, self.N, self.CL = g, spec, n, cl
        self.lora = lora
        self.cos, self.sin, self.rot = rope
        self.attended = attended        # None: closed cache columns are not zeroed (part_model's mask_clip)
        self.zero = g.const(np.array([0.0], np.float32))

    def proj(self, x: str, w, i: int, key: str, bias: np.ndarray | None = None, scale: float = 1.0) -> str:
        """x @ w[l<i>.<key>] (+ bias), times scale; plus the LoRA term where the layer takes one."""
        y = self.g.linear(x, w[f"l{i}.{key}"], bias, scale)
        return y if self.lora is None else self.lora(self.g, x, y, i, key, scale)

    def rope(self, t: str) -> str:
        g = self.g
        return g.op("Add", g.op("Mul", t, self.cos), g.op("Mul", g.op("MatMul", t, self.rot), self.sin))

    def __call__(self, x: str, mask: str, w, i: int) -> str:
        g, s, N, CL = self.g, self.spec, self.N, self.CL
        D, KVH, Gq = s.head_dim, s.kv_heads, s.heads // s.kv_heads
        k_in = g.input(f"past_key_{i}_in", [KVH, 1, D, CL - N])
        v_in = g.input(f"past_value_{i}_in", [KVH, 1, CL - N, D])
        h = g.rms(x, w[f"l{i}.attn_norm"], s.eps)
        bias = (lambda n: w[f"l{i}.{n}"]) if s.qkv_bias else (lambda n: None)
        qscale = 1.0 if s.qk_norm else float(1 / np.sqrt(D))    # after a q norm the scale comes later
        q = g.reshape(self.proj(h, w, i, "wq", bias("bq"), qscale), [N, s.heads, D])
        k = g.reshape(self.proj(h, w, i, "wk", bias("bk")), [N, KVH, D])
        v = g.reshape(self.proj(h, w, i, "wv", bias("bv")), [N, KVH, D])
        if s.qk_norm:
            q = g.rms(q, w[f"l{i}.q_norm"] / np.float32(np.sqrt(D)), s.eps)
            k = g.rms(k, w[f"l{i}.k_norm"], s.eps)
        q, k = self.rope(q), self.rope(k)
        k_new = g.reshape(g.op("Transpose", k, perm=[1, 2, 0]), [KVH, 1, D, N])
        v_new = g.reshape(g.op("Transpose", v, perm=[1, 0, 2]), [KVH, 1, N, D])
        g.output(k_new, f"past_key_{i}_out", [KVH, 1, D, N])
        g.output(v_new, f"past_value_{i}_out", [KVH, 1, N, D])
        keys, values = g.op("Concat", k_in, k_new, axis=3), g.op("Concat", v_in, v_new, axis=2)
        if self.attended is not None:
            keys = g.op("Where", self.attended[0], keys, self.zero)
            values = g.op("Where", self.attended[1], values, self.zero)
        qg = g.reshape(g.op("Transpose", g.reshape(q, [N, KVH, Gq, D]), perm=[1, 2, 0, 3]), [KVH, 1, Gq * N, D])
        sc = g.op("Add", g.reshape(g.op("MatMul", qg, keys), [KVH, Gq, N, CL]), mask)
        p = g.reshape(g.op("Softmax", sc, axis=-1), [KVH, 1, Gq * N, CL])
        o = g.reshape(g.op("MatMul", p, values), [KVH, Gq, N, D])
        o = g.reshape(g.op("Transpose", o, perm=[2, 0, 1, 3]), [1, N, s.heads * D])
        x = g.op("Add", x, self.proj(o, w, i, "wo"))
        h = g.rms(x, w[f"l{i}.mlp_norm"], s.eps)
        gate = self.proj(h, w, i, "wg")
        act = g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), self.proj(h, w, i, "wu"))
        return g.op("Add", x, self.proj(act, w, i, "wd"))


def part_model(spec: ModelSpec, plan: PartPlan, w, ar: int, part: int, *, float_graph: bool = True,
               lora: LoraHook | None = None, mask_clip: float | None = None,
               store: ExternalWeights | None = None) -> onnx.ModelProto:
    """Part ``part`` (1-based) for ``ar`` tokens per call, weights read from ``w`` as needed;
    ``float_graph``: the prescaled RMSNorm (what qnnrt convert writes, compiled as it is in fp16 or
    quantized; False: the plain one of the test fixtures' bundles); ``lora``: adds each targeted
    projection's LoRA term (convert/lora.py); ``mask_clip``: the mask clipped there and closed cache
    columns not zeroed, as AI Hub's exports are (only the test bundles that stand in for them);
    ``store``: the weights go there as they are made (the model then holds none; the graphs of a part
    given the same store share them), else into the model.
    A part may hold no layers (the embedding or the head alone: the test bundles)."""
    N, H = ar, spec.hidden
    g = _Graph(f"part{part}", prescale=float_graph, store=store)
    first, stop = plan.bounds[part - 1]
    if part == 1:       # as an output, the embedding is an Identity's (a Gather's output is quantized as its table)
        ids = g.input("input_ids", [1, N], TensorProto.INT32)
        x = g.op("Gather", g.const(w["embed"]), ids, axis=0, out=EMBED if stop > first else None)
    else:
        x = g.input(plan.hidden_name(part - 1), [1, N, H])
    if stop > first:
        x = _layers(g, spec, plan, w, ar, range(first, stop), x, lora, mask_clip)
    if part < plan.parts:
        g.output(x, plan.hidden_name(part), [1, N, H])
    else:
        h = g.rms(x, w["norm"], spec.eps)
        head = np.asarray(w["embed"]).T if spec.tied else w["lm_head"]
        g.output(g.linear(h, head, w["lm_bias"] if spec.head_bias else None), "logits", [1, N, spec.vocab])
    return g.model()


def _layers(g: _Graph, spec: ModelSpec, plan: PartPlan, w, ar: int, layers: range, x: str,
            lora: LoraHook | None, mask_clip: float | None) -> str:
    """The mask, RoPE inputs and ``layers`` over the hidden state ``x``."""
    N, CL, D = ar, plan.context, spec.head_dim
    mask = g.input("attention_mask", [1, 1, N, CL])
    cos = g.input("position_ids_cos", [1, 1, N, D // 2])
    sin = g.input("position_ids_sin", [1, 1, N, D // 2])
    cos = g.reshape(g.op("Concat", cos, cos, axis=-1), [N, 1, D])
    sin = g.reshape(g.op("Concat", sin, sin, axis=-1), [N, 1, D])
    rot = np.zeros((D, D), np.float32)          # t @ rot == rotate_half(t) == cat(-t2, t1)
    rot[np.arange(D // 2) + D // 2, np.arange(D // 2)] = -1
    rot[np.arange(D // 2), np.arange(D // 2) + D // 2] = 1
    # Genie leaves never-written cache slots as allocated (garbage, even NaN), trusting the mask: entries
    # of columns no row attends are zeroed before use, so neither an additive -1000 nor 0 x inf sees them
    attended: tuple[str, str] | None = None
    if mask_clip is None:
        half_closed = g.const(np.array([MASKED / 2], np.float32))
        attends = g.op("Greater", g.op("ReduceMax", mask, axes=[2], keepdims=1), half_closed)
        attended = (attends, g.reshape(attends, [1, 1, CL, 1]))
    else:
        mask = g.op("Max", mask, g.const(np.array([mask_clip], np.float32)))
    layer = _Layer(g, spec, N, CL, (cos, sin, g.const(rot)), attended, lora)
    for i in layers:
        x = layer(x, mask, w, i)
    return x
