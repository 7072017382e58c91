"""A tiny LLM of ExecuTorch's Qualcomm LLM layout (hybrid prefill_forward + kv_forward, smart-mask KV
cache), quantized at the method boundary as ExecuTorch's quantized exports are: uint16 atten_mask and
logits, uint8 k/v caches, int32 tokens / input_pos, the encodings in the constant methods.

Inside, each method's QNN graph is float (fp16 on HTP; compiled with ORT's QNN EP, one context binary
per method: ORT names the graphs itself, and a binary with a single graph runs for any method). The
boundary is quantized by ``quantized_decomposed`` CPU kernels in the .pte around the delegate call:
dequantize(mask, caches) -> delegate -> quantize(logits, k_out, v_out).

``TinyLlm.reference`` is the float numpy model with the same weights (float caches, float mask
0 / -255); ``TinyLlm.reference(quantized=True)`` applies the boundary's quantization too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.helpers.pte_writer import PteBuilder, qnn_wrap, scalar_type
from tests.helpers.qnn_fixtures import compile_models

L, H, D, E, V, C = 2, 1, 8, 8, 32, 16          # layers, kv heads, head dim, model dim, vocab, context
T_PREFILL = 4
MASK_SCALE, MASK_ZP = 255.0 / 65535.0, 65535   # uint16 65535 -> 0.0 (open), 0 -> -255.0 (closed)
EOS_ID, BOS_ID = 1, 0


@dataclass(frozen=True)
class Encoding:
    scale: float
    zero_point: int
    dtype: type = np.uint8

    @property
    def qmin(self) -> int:
        return int(np.iinfo(self.dtype).min)

    @property
    def qmax(self) -> int:
        return int(np.iinfo(self.dtype).max)

    def quantize(self, x) -> np.ndarray:
        q = np.rint(np.asarray(x, np.float32) * np.float32(1.0 / self.scale)).astype(np.float64) + self.zero_point
        return np.clip(q, self.qmin, self.qmax).astype(self.dtype)

    def dequantize(self, q) -> np.ndarray:
        return ((np.asarray(q).astype(np.float32) - np.float32(self.zero_point)) * np.float32(self.scale))

    def attr(self) -> list:
        """ExecuTorch's get_kv_output_<i>_quant_attr value."""
        return [float(self.scale), int(self.zero_point), self.qmin, self.qmax,
                "torch.uint8" if self.dtype == np.uint8 else "torch.uint16"]


@dataclass
class TinyLlm:
    seed: int = 3
    w: dict = field(default_factory=dict)
    k_enc: list = field(default_factory=list)      # per layer
    v_enc: list = field(default_factory=list)
    logits_enc: Encoding = Encoding(1.0, 0, np.uint16)

    def __post_init__(self):
        rng = np.random.default_rng(self.seed)
        f = np.float32
        self.w = {"emb": rng.standard_normal((V, E)).astype(f), "pos": (0.5 * rng.standard_normal((C, E))).astype(f),
                  "out": (rng.standard_normal((E, V)) / np.sqrt(E)).astype(f) * f(3.0)}
        for l in range(L):
            for n in ("q", "k", "v", "o"):
                self.w[f"{n}{l}"] = (rng.standard_normal((E if n != "o" else D, D if n != "o" else E))
                                     / np.sqrt(E)).astype(f)
        # encodings from the float activations' ranges: distinct per tensor (so a mixed-up order shows)
        ks, vs, lg = self._ranges()
        self.k_enc = [_enc8(*r) for r in ks]
        self.v_enc = [_enc8(*r) for r in vs]
        lo, hi = lg
        scale = (hi - lo) * 2.0 / 65535
        self.logits_enc = Encoding(float(scale), int(round(-(lo - 0.5 * (hi - lo)) / scale)), np.uint16)

    def _ranges(self):
        rng = np.random.default_rng(1000 + self.seed)
        toks = rng.integers(0, V, size=C).tolist()
        logits, ks, vs = self._forward_all(toks)
        return ([(float(k.min()), float(k.max())) for k in ks], [(float(v.min()), float(v.max())) for v in vs],
                (float(logits.min()), float(logits.max())))

    def _forward_all(self, toks):
        """Float causal pass over a whole sequence (for the encodings' ranges)."""
        x = self.w["emb"][toks] + self.w["pos"][: len(toks)]
        ks, vs = [], []
        n = len(toks)
        causal = np.tril(np.ones((n, n), bool))
        for l in range(L):
            q, k, v = x @ self.w[f"q{l}"], x @ self.w[f"k{l}"], x @ self.w[f"v{l}"]
            s = np.where(causal, q @ k.T / np.sqrt(D), -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            x = x + (p @ v) @ self.w[f"o{l}"]
            ks.append(k)
            vs.append(v)
        return x @ self.w["out"], ks, vs

    # ---------------------------------------------------------------------------------------------
    def step(self, tokens, n_past: int, kc: list, vc: list, quantized: bool = False):
        """One float step of n new tokens at n_past over float caches kc[l] [n_past, D], vc[l].

        Returns (logits [n, V], new k per layer [n, D], new v per layer [n, D]); with quantized=True
        the caches given are dequantized uint8 values and the logits come back through uint16."""
        n = len(tokens)
        x = self.w["emb"][tokens] + self.w["pos"][n_past:n_past + n]
        nk, nv = [], []
        for l in range(L):
            q, k, v = x @ self.w[f"q{l}"], x @ self.w[f"k{l}"], x @ self.w[f"v{l}"]
            ka, va = np.concatenate([kc[l], k]), np.concatenate([vc[l], v])
            s = q @ ka.T / np.sqrt(D)
            s[:, n_past:] = np.where(np.tril(np.ones((n, n), bool)), s[:, n_past:], -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            x = x + (p @ va) @ self.w[f"o{l}"]
            nk.append(k)
            nv.append(v)
        logits = x @ self.w["out"]
        if quantized:
            logits = self.logits_enc.dequantize(self.logits_enc.quantize(logits))
        return logits.astype(np.float32), nk, nv

    def reference(self, prompt, max_new_tokens: int, quantized: bool = False, eos: int | None = None):
        """Greedy generation (prompt in one prefill window per T tokens) -> (tokens, logits per token)."""
        kc = [np.zeros((0, D), np.float32) for _ in range(L)]
        vc = [np.zeros((0, D), np.float32) for _ in range(L)]
        n_past = 0

        def run(toks):
            nonlocal n_past
            lg, nk, nv = self.step(toks, n_past, kc, vc, quantized)
            for l in range(L):
                k, v = nk[l], nv[l]
                if quantized:
                    k = self.k_enc[l].dequantize(self.k_enc[l].quantize(k))
                    v = self.v_enc[l].dequantize(self.v_enc[l].quantize(v))
                kc[l] = np.concatenate([kc[l], k])
                vc[l] = np.concatenate([vc[l], v])
            n_past += len(toks)
            return lg

        for j in range(0, len(prompt), T_PREFILL):
            lg = run(list(prompt[j:j + T_PREFILL]))
        out, rows = [int(np.argmax(lg[-1]))], [lg[-1]]
        while len(out) < max_new_tokens and out[-1] != eos:
            lg = run([out[-1]])
            out.append(int(np.argmax(lg[-1])))
            rows.append(lg[-1])
        return out, rows, (kc, vc)

    def score_logprobs(self, tokens, n_prefill: int) -> list[float]:
        """Teacher-forced float log p(tokens[i+1] | tokens[:i+1])."""
        kc = [np.zeros((0, D), np.float32) for _ in range(L)]
        vc = [np.zeros((0, D), np.float32) for _ in range(L)]
        rows = []
        n_past = 0
        chunks = [tokens[j:min(j + T_PREFILL, n_prefill)] for j in range(0, n_prefill, T_PREFILL)]
        chunks += [[t] for t in tokens[n_prefill:-1]]
        for ch in chunks:
            lg, nk, nv = self.step(list(ch), n_past, kc, vc)
            for l in range(L):
                kc[l], vc[l] = np.concatenate([kc[l], nk[l]]), np.concatenate([vc[l], nv[l]])
            n_past += len(ch)
            rows.extend(lg)
        out = []
        for r, t in zip(rows, tokens[1:]):
            m = r.max()
            out.append(float(r[t] - m - np.log(np.exp(r - m).sum())))
        return out

    # ---------------------------------------------------------------------------------------------
    def onnx_model(self, T: int) -> onnx.ModelProto:
        """The float graph of one method (AR-T): float mask / caches in, float logits / new k, v out."""
        S = C - T
        f = TensorProto.FLOAT
        inits = [numpy_helper.from_array(a, n) for n, a in self.w.items()]
        inits += [numpy_helper.from_array(np.array([1, T, D], np.int64), "shp_td"),
                  numpy_helper.from_array(np.array([1, 1, T, D], np.int64), "shp_4d"),
                  numpy_helper.from_array(np.array(1 / np.sqrt(D), np.float32), "inv_sqrt_d")]
        ins = [helper.make_tensor_value_info("input_0_tokens", TensorProto.INT32, [1, T]),
               helper.make_tensor_value_info("input_1_atten_mask", f, [1, 1, T, C]),
               helper.make_tensor_value_info("input_2_input_pos", TensorProto.INT32, [1, T])]
        ins += [helper.make_tensor_value_info(f"input_{3 + l}_k_cache_{l}", f, [1, H, D, S]) for l in range(L)]
        ins += [helper.make_tensor_value_info(f"input_{3 + L + l}_v_cache_{l}", f, [1, H, S, D]) for l in range(L)]
        nodes = [helper.make_node("Gather", ["emb", "input_0_tokens"], ["e"]),
                 helper.make_node("Gather", ["pos", "input_2_input_pos"], ["p"]),
                 helper.make_node("Add", ["e", "p"], ["x0"])]
        x = "x0"
        for l in range(L):
            def nd(op, i, o, l=l, **kw):
                nodes.append(helper.make_node(op, i, [f"{o}{l}"], **kw))
                return f"{o}{l}"
            q = nd("Reshape", [nd("MatMul", [x, f"q{l}"], "q_"), "shp_4d"], "q4_")
            k4 = nd("Reshape", [nd("MatMul", [x, f"k{l}"], "k_"), "shp_4d"], "k4_")
            v4 = nd("Reshape", [nd("MatMul", [x, f"v{l}"], "v_"), "shp_4d"], "v4_")
            kt = nd("Transpose", [k4], "kt_", perm=[0, 1, 3, 2])
            nodes.append(helper.make_node("Identity", [kt], [f"output_{1 + l}_k_out_{l}"]))
            nodes.append(helper.make_node("Identity", [v4], [f"output_{1 + L + l}_v_out_{l}"]))
            ka = nd("Concat", [f"input_{3 + l}_k_cache_{l}", kt], "ka_", axis=3)
            va = nd("Concat", [f"input_{3 + L + l}_v_cache_{l}", v4], "va_", axis=2)
            s = nd("Add", [nd("Mul", [nd("MatMul", [q, ka], "s0_"), "inv_sqrt_d"], "s1_"), "input_1_atten_mask"], "s_")
            pr = nd("Softmax", [s], "pr_", axis=-1)
            a = nd("Reshape", [nd("MatMul", [pr, va], "a4_"), "shp_td"], "a_")
            x = nd("Add", [x, nd("MatMul", [a, f"o{l}"], "ao_")], "x_")
        nodes.append(helper.make_node("MatMul", [x, "out"], ["output_0_logits"]))
        outs = [helper.make_tensor_value_info("output_0_logits", f, [1, T, V])]
        outs += [helper.make_tensor_value_info(f"output_{1 + l}_k_out_{l}", f, [1, H, D, T]) for l in range(L)]
        outs += [helper.make_tensor_value_info(f"output_{1 + L + l}_v_out_{l}", f, [1, H, T, D]) for l in range(L)]
        g = helper.make_graph(nodes, f"tiny_llm_ar{T}", ins, outs, inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 9
        return m

    def binaries(self, workdir: Path) -> dict[str, bytes]:
        """method name -> its context binary (compiled once per weights, cached)."""
        out = {}
        for name, T in (("prefill_forward", T_PREFILL), ("kv_forward", 1)):
            built = compile_models([self.onnx_model(T)], [f"tiny_llm_{name}"], workdir)
            out[name] = built.path.read_bytes()
        return out


def _enc8(lo: float, hi: float) -> Encoding:
    lo, hi = min(lo, 0.0) * 1.5, max(hi, 0.0) * 1.5
    scale = (hi - lo) / 255
    return Encoding(float(scale), int(round(-lo / scale)), np.uint8)


DQ, Q = "quantized_decomposed::dequantize_per_tensor.out", "quantized_decomposed::quantize_per_tensor.out"


def _q_args(m, enc: Encoding):
    return [m.double(enc.scale), m.int(enc.zero_point), m.int(enc.qmin), m.int(enc.qmax),
            m.int(scalar_type(enc.dtype))]


def _float_method(m, seg, T: int) -> None:
    """A method whose I/O is the float graph's own (an fp16 ExecuTorch export): one delegate call."""
    S = C - T
    f = np.float32
    ins = [m.tensor(np.int32, (1, T)), m.tensor(f, (1, 1, T, C)), m.tensor(np.int32, (1, T))]
    ins += [m.tensor(f, (1, H, D, S)) for _ in range(L)] + [m.tensor(f, (1, H, S, D)) for _ in range(L)]
    outs = [m.tensor(f, (1, T, V))]
    outs += [m.tensor(f, (1, H, D, T)) for _ in range(L)] + [m.tensor(f, (1, H, T, D)) for _ in range(L)]
    m.delegate_call(m.delegate("QnnBackend", segment=seg), ins + outs)
    m.inputs, m.outputs = ins, outs


def write_pte(model: TinyLlm, binaries: dict[str, bytes], path, *, constants: dict | None = None,
              method_order=("kv_forward", "prefill_forward"), float_io: bool = False) -> Path:
    """The quantized-boundary .pte (``float_io``: float I/O, the delegate call alone, no logits
    encoding); ``constants`` overrides / adds constant-method values (a value of None drops that
    method); ``method_order=("kv_forward",)`` writes a kv-only file."""
    b = PteBuilder()
    mask_enc = Encoding(MASK_SCALE, MASK_ZP, np.uint16)
    for name in method_order:
        T = T_PREFILL if name == "prefill_forward" else 1
        S = C - T
        seg = b.add_segment(qnn_wrap(binaries[name]))
        m = b.method(name)
        if float_io:
            _float_method(m, seg, T)
            continue
        tok = m.tensor(np.int32, (1, T))
        mask_q = m.tensor(np.uint16, (1, 1, T, C))
        pos = m.tensor(np.int32, (1, T))
        kq = [m.tensor(np.uint8, (1, H, D, S)) for _ in range(L)]
        vq = [m.tensor(np.uint8, (1, H, S, D)) for _ in range(L)]
        mask_f = m.tensor(np.float32, (1, 1, T, C))
        m.kernel(DQ, [mask_q, *_q_args(m, mask_enc), m.null(), mask_f, mask_f])
        kf, vf = [], []
        for l in range(L):
            kf.append(m.tensor(np.float32, (1, H, D, S)))
            m.kernel(DQ,
                     [kq[l], *_q_args(m, model.k_enc[l]), m.null(), kf[l], kf[l]])
        for l in range(L):
            vf.append(m.tensor(np.float32, (1, H, S, D)))
            m.kernel(DQ,
                     [vq[l], *_q_args(m, model.v_enc[l]), m.null(), vf[l], vf[l]])
        lf = m.tensor(np.float32, (1, T, V))
        kof = [m.tensor(np.float32, (1, H, D, T)) for _ in range(L)]
        vof = [m.tensor(np.float32, (1, H, T, D)) for _ in range(L)]
        d = m.delegate("QnnBackend", segment=seg)
        m.delegate_call(d, [tok, mask_f, pos, *kf, *vf, lf, *kof, *vof])
        lq = m.tensor(np.uint16, (1, T, V))
        m.kernel(Q, [lf, *_q_args(m, model.logits_enc), lq, lq])
        koq, voq = [], []
        for l in range(L):
            koq.append(m.tensor(np.uint8, (1, H, D, T)))
            m.kernel(Q, [kof[l], *_q_args(m, model.k_enc[l]), koq[l], koq[l]])
        for l in range(L):
            voq.append(m.tensor(np.uint8, (1, H, T, D)))
            m.kernel(Q, [vof[l], *_q_args(m, model.v_enc[l]), voq[l], voq[l]])
        m.inputs = [tok, mask_q, pos, *kq, *vq]
        m.outputs = [lq, *koq, *voq]

    consts: dict = {"get_max_seq_len": C, "get_max_context_len": C, "get_n_layers": L, "get_vocab_size": V,
                    "get_use_kv_cache": True, "get_kv_io_bit_width": 8, "get_eos_id": EOS_ID,
                    "get_bos_id": BOS_ID, "get_logits_scale": model.logits_enc.scale,
                    "get_logits_zero_point": model.logits_enc.zero_point}
    for i, enc in enumerate(model.k_enc + model.v_enc):
        consts[f"get_kv_output_{i}_quant_attr"] = enc.attr()
    if float_io:
        consts = {k: v for k, v in consts.items()
                  if not k.startswith(("get_logits_", "get_kv_output_"))}
    consts.update(constants or {})
    for name, val in consts.items():
        if val is None:
            continue
        m = b.method(name)
        m.outputs = [_scalar(m, x) for x in (val if isinstance(val, list) else [val])]
    return Path(b.save(path))


def _scalar(m, x) -> int:
    if isinstance(x, bool):
        return m.bool(x)
    if isinstance(x, int):
        return m.int(x)
    if isinstance(x, float):
        return m.double(x)
    return m.string(str(x))
