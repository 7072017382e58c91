"""The float reference of every architecture `qnnrt convert` writes: the same math as Hugging
Face's modeling code (checked against `transformers` by tools/fixtures/check_convert_reference.py),
in float64 numpy over the converter's own weights, whole sequence at once (no cache). It judges the
bundles in the tests: greedy tokens and each step's top-2 margin."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qnnrt.convert.spec import ModelSpec
from qnnrt.formats.genie import RopeConfig
from qnnrt.llm.rope import inverse_frequencies


def rope_tables(spec: ModelSpec, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [T, D/2] as Genie computes them from the bundle's config (llama3 scaling included)."""
    inv = inverse_frequencies(RopeConfig(spec.head_dim // 2, spec.rope_theta, spec.rope_scaling))
    ang = positions.astype(np.float64)[:, None] * inv[None, :]
    return np.cos(ang), np.sin(ang)


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _attention(spec: ModelSpec, w, i: int, h: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    T, D = h.shape[0], spec.head_dim
    q, k, v = h @ w[f"l{i}.wq"], h @ w[f"l{i}.wk"], h @ w[f"l{i}.wv"]
    if spec.qkv_bias:
        q, k, v = q + w[f"l{i}.bq"], k + w[f"l{i}.bk"], v + w[f"l{i}.bv"]
    q, k = q.reshape(T, spec.heads, D), k.reshape(T, spec.kv_heads, D)
    v = v.reshape(T, spec.kv_heads, D)
    if spec.qk_norm:
        q, k = _rms(q, w[f"l{i}.q_norm"], spec.eps), _rms(k, w[f"l{i}.k_norm"], spec.eps)
    q, k = _rope(q, cos, sin) / np.sqrt(D), _rope(k, cos, sin)
    G = spec.heads // spec.kv_heads
    k, v = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)
    s = np.einsum("thd,shd->hts", q, k) + np.triu(np.full((T, T), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, v).reshape(T, spec.heads * D) @ w[f"l{i}.wo"]


def logits(spec: ModelSpec, w, ids: list[int]) -> np.ndarray:
    """Logits [T, V] of the whole sequence (`w`: canonical weights, [in, out] projections)."""
    x = np.asarray(w["embed"])[np.asarray(ids)].astype(np.float64)
    cos, sin = rope_tables(spec, np.arange(len(ids)))
    for i in range(spec.layers):
        x = x + _attention(spec, w, i, _rms(x, w[f"l{i}.attn_norm"], spec.eps), cos, sin)
        h = _rms(x, w[f"l{i}.mlp_norm"], spec.eps)
        g = h @ w[f"l{i}.wg"]
        x = x + (g / (1 + np.exp(-g)) * (h @ w[f"l{i}.wu"])) @ w[f"l{i}.wd"]
    head = np.asarray(w["embed"]).T if spec.tied else w["lm_head"]
    out = _rms(x, w["norm"], spec.eps) @ head
    return out + w["lm_bias"] if spec.head_bias else out


@dataclass(frozen=True)
class Generation:
    """Greedy tokens after a prompt and each step's top-1 minus top-2 logit."""
    tokens: list[int]
    margins: list[float]


def greedy(spec: ModelSpec, w, prompt: list[int], max_new: int, stop: frozenset[int] = frozenset()) -> Generation:
    """Greedy decoding, stopping after a token of ``stop`` (included)."""
    cache = {k: np.asarray(w[k], np.float64) for k in spec.shapes()}
    seq, out, margins = list(prompt), list[int](), list[float]()
    while len(out) < max_new:
        last = logits(spec, cache, seq)[-1]
        top = np.argsort(last)[::-1]
        out.append(int(top[0]))
        margins.append(float(last[top[0]] - last[top[1]]))
        seq.append(out[-1])
        if out[-1] in stop:
            break
    return Generation(out, margins)
