"""Llama-shaped demo models, built from numpy + onnx.helper with seeded weights.

The model is a decoder stack that takes hidden states (no embedding table) and returns logits:

    per layer:  h = x + O(attention(rope(Q(norm1(x))), rope(K(norm1(x))), V(norm1(x))))
                x' = h + Down(silu(Gate(norm2(h))) * Up(norm2(h)))
    at the end: logits = softcap(LMHead(norm(x)))

Every projection (Q, K, V, O, Gate, Up, Down, LM head) is an ONNX ``MatMul``; the attention itself
uses ``Mul`` + ``ReduceSum`` (no MatMul), as the attention of the field's ExecuTorch Llama programs
is not a Linear. So ``--cpu-ops MatMul`` keeps every Linear on the CPU and cuts the HTP part of each
layer into 4 partitions (residual add + norm1; rope + attention; residual add + norm2; SiLU gate), plus
the final norm and the logit soft-cap: 4 * 16 + 2 = 66 partitions for ``tiny``, as in the field.

There is no KV cache: the ``decode`` variant is the same stack with sequence length 1 (its RoPE
tables are those of position ``seq``). It has the same partition structure as ``prefill``, which is
what two-method programs need.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qnnrt.errors import BuildError

OPSET = 17


@dataclass(frozen=True)
class DemoConfig:
    """Shape of a demo decoder stack."""
    name: str
    layers: int
    hidden: int
    heads: int
    head_dim: int
    ffn: int
    vocab: int
    seq: int                 # sequence length of the prefill / forward method
    seed: int = 0
    softcap: float = 30.0
    eps: float = 1e-5
    cpu_ops: tuple[str, ...] = ("MatMul",)   # the placement the demo is meant to be built with


PRESETS: dict[str, DemoConfig] = {
    # 16 layers like Llama-3.2-1B; 66 HTP partitions with --cpu-ops MatMul.
    "tiny": DemoConfig("tiny", layers=16, hidden=64, heads=2, head_dim=32, ffn=128, vocab=128,
                       seq=16, seed=1),
    # Many small contexts: their PD estimates add up past the simulator's 3.40 GiB PD.
    "pd": DemoConfig("pd", layers=100, hidden=64, heads=2, head_dim=32, ffn=128, vocab=128,
                     seq=16, seed=2),
}


def demo_config(preset: str | DemoConfig) -> DemoConfig:
    if isinstance(preset, DemoConfig):
        return preset
    try:
        return PRESETS[preset]
    except KeyError:
        raise BuildError(f"unknown demo preset {preset!r}; choose one of {', '.join(PRESETS)}") from None


def method_names(two_method: bool) -> list[str]:
    return ["prefill", "decode"] if two_method else ["forward"]


def demo_models(preset: str | DemoConfig, two_method: bool = False) -> list[tuple[str, onnx.ModelProto]]:
    """[(method name, model)]: ``forward`` (sequence ``seq``), or ``prefill`` + ``decode`` (1)."""
    cfg = demo_config(preset)
    if not two_method:
        return [("forward", make_decoder(cfg))]
    return [("prefill", make_decoder(cfg)), ("decode", make_decoder(cfg, seq=1, start_pos=cfg.seq))]


def _rope_tables(seq: int, start_pos: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / (10000.0 ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    pos = np.arange(start_pos, start_pos + seq, dtype=np.float64)
    ang = np.outer(pos, inv)                                  # [seq, dim/2]
    ang = np.concatenate([ang, ang], axis=-1)                 # [seq, dim]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


class _GraphBuilder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def const(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        """A single-output node; returns its output name."""
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=f"{name}_node", **attrs))
        return name

    def op_n(self, op_type: str, inputs: list[str], name: str, n_out: int, **attrs) -> list[str]:
        """A node with ``n_out`` outputs ``{name}_0``..; returns their names."""
        outs = [f"{name}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=f"{name}_node", **attrs))
        return outs


def make_decoder(preset: str | DemoConfig, seq: int | None = None, start_pos: int = 0) -> onnx.ModelProto:
    """The decoder stack for ``preset`` with sequence length ``seq`` (default: the preset's)."""
    cfg = demo_config(preset)
    S = cfg.seq if seq is None else int(seq)
    H, D, d, F = cfg.heads, cfg.head_dim, cfg.hidden, cfg.ffn
    if D % 2:
        raise BuildError("head_dim must be even (RoPE rotates halves)")
    rng = np.random.default_rng(cfg.seed)
    b = _GraphBuilder()

    def weight(name, shape, scale):
        return b.const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    cos, sin = _rope_tables(S, start_pos, D)
    b.const("rope_cos", cos)
    b.const("rope_sin", sin)
    mask = np.triu(np.full((S, S), -1e4, np.float32), k=1)   # causal, additive
    b.const("causal_mask", mask)
    b.const("eps", np.array(cfg.eps, np.float32))
    b.const("attn_scale", np.array(1.0 / np.sqrt(D), np.float32))
    b.const("shape_heads", np.array([S, H, D], np.int64))
    b.const("shape_flat", np.array([1, S, H * D], np.int64))
    b.const("halves", np.array([D // 2, D // 2], np.int64))
    b.const("ax_last", np.array([-1], np.int64))
    b.const("ax_1", np.array([1], np.int64))
    b.const("ax_2", np.array([2], np.int64))
    b.const("ax_3", np.array([3], np.int64))
    b.const("softcap_in", np.array(1.0 / cfg.softcap, np.float32))
    b.const("softcap_out", np.array(cfg.softcap, np.float32))

    def rmsnorm(x, w, p):
        sq = b.op("Mul", [x, x], f"{p}_sq")
        ms = b.op("ReduceMean", [sq], f"{p}_ms", axes=[-1], keepdims=1)
        rs = b.op("Sqrt", [b.op("Add", [ms, "eps"], f"{p}_mse")], f"{p}_rs")
        xn = b.op("Div", [x, rs], f"{p}_xn")
        return b.op("Mul", [xn, w], f"{p}_out")

    def heads(t, p):                                   # [1,S,H*D] -> [H,S,D]
        r = b.op("Reshape", [t, "shape_heads"], f"{p}_r")
        return b.op("Transpose", [r], f"{p}_t", perm=[1, 0, 2])

    def rope(t, p):                                    # [H,S,D]
        lo, hi = b.op_n("Split", [t, "halves"], f"{p}_split", n_out=2, axis=-1)
        rot = b.op("Concat", [b.op("Neg", [hi], f"{p}_neg"), lo], f"{p}_rot", axis=-1)
        return b.op("Add", [b.op("Mul", [t, "rope_cos"], f"{p}_c"), b.op("Mul", [rot, "rope_sin"], f"{p}_s")],
                    f"{p}_out")

    x = "hidden_states"
    for i in range(cfg.layers):
        p = f"l{i}"
        xn = rmsnorm(x, b.const(f"{p}.norm1", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)), f"{p}_n1")
        q = b.op("MatMul", [xn, weight(f"{p}.wq", (d, H * D), d ** -0.5)], f"{p}_q")
        k = b.op("MatMul", [xn, weight(f"{p}.wk", (d, H * D), d ** -0.5)], f"{p}_k")
        v = b.op("MatMul", [xn, weight(f"{p}.wv", (d, H * D), d ** -0.5)], f"{p}_v")
        qr = rope(heads(q, f"{p}_qh"), f"{p}_qrope")
        kr = rope(heads(k, f"{p}_kh"), f"{p}_krope")
        vh = heads(v, f"{p}_vh")
        # scores[h,i,j] = sum_d q[h,i,d] k[h,j,d]   (Mul + ReduceSum: no MatMul in the attention)
        prod = b.op("Mul", [b.op("Unsqueeze", [qr, "ax_2"], f"{p}_qe"),
                            b.op("Unsqueeze", [kr, "ax_1"], f"{p}_ke")], f"{p}_qk")
        sc = b.op("ReduceSum", [prod, "ax_last"], f"{p}_scores", keepdims=0)
        sc = b.op("Add", [b.op("Mul", [sc, "attn_scale"], f"{p}_scaled"), "causal_mask"], f"{p}_masked")
        pr = b.op("Softmax", [sc], f"{p}_probs", axis=-1)
        # out[h,i,d] = sum_j p[h,i,j] v[h,j,d]
        pv = b.op("Mul", [b.op("Unsqueeze", [pr, "ax_3"], f"{p}_pe"),
                          b.op("Unsqueeze", [vh, "ax_1"], f"{p}_ve")], f"{p}_pv")
        att = b.op("ReduceSum", [pv, "ax_2"], f"{p}_att", keepdims=0)
        att = b.op("Reshape", [b.op("Transpose", [att], f"{p}_att_t", perm=[1, 0, 2]), "shape_flat"], f"{p}_att_f")
        o = b.op("MatMul", [att, weight(f"{p}.wo", (H * D, d), (H * D) ** -0.5)], f"{p}_o")
        h = b.op("Add", [x, o], f"{p}_h")
        hn = rmsnorm(h, b.const(f"{p}.norm2", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)), f"{p}_n2")
        g = b.op("MatMul", [hn, weight(f"{p}.wg", (d, F), d ** -0.5)], f"{p}_gate")
        u = b.op("MatMul", [hn, weight(f"{p}.wu", (d, F), d ** -0.5)], f"{p}_up")
        act = b.op("Mul", [b.op("Mul", [g, b.op("Sigmoid", [g], f"{p}_sig")], f"{p}_silu"), u], f"{p}_act")
        dn = b.op("MatMul", [act, weight(f"{p}.wd", (F, d), F ** -0.5)], f"{p}_down")
        x = b.op("Add", [h, dn], f"{p}_out")
    xn = rmsnorm(x, b.const("final.norm", np.ones(d, np.float32)), "final_n")
    logits = b.op("MatMul", [xn, weight("lm_head.w", (d, cfg.vocab), d ** -0.5)], "lm_head")
    t = b.op("Tanh", [b.op("Mul", [logits, "softcap_in"], "softcap_scaled")], "softcap_tanh")
    b.nodes.append(helper.make_node("Mul", [t, "softcap_out"], ["logits"], name="softcap_node"))

    graph = helper.make_graph(
        b.nodes, f"qnnrt_demo_{cfg.name}_s{S}",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [1, S, d])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, S, cfg.vocab])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="qnnrt.compiler.demo")
    model.ir_version = 9
    return model


def demo_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded float32 inputs for every graph input of ``model`` (static shapes)."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        shape = [dim.dim_value for dim in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def reference_outputs(model: onnx.ModelProto | str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float32 reference: ONNX Runtime's CPU EP on the original model."""
    import onnxruntime as ort
    src = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def demo_reference(preset: str | DemoConfig, inputs: dict[str, np.ndarray] | None = None,
                   method: str = "forward") -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(inputs, float32 outputs) of a demo method (``forward``, ``prefill`` or ``decode``)."""
    cfg = demo_config(preset)
    model = make_decoder(cfg, seq=1, start_pos=cfg.seq) if method == "decode" else make_decoder(cfg)
    if inputs is None:
        inputs = demo_inputs(model)
    return inputs, reference_outputs(model, inputs)


__all__ = ["DemoConfig", "PRESETS", "demo_config", "demo_models", "make_decoder", "demo_inputs",
           "reference_outputs", "demo_reference", "method_names"]
