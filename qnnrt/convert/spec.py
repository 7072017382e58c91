"""What a converted model is, whatever file it came from: its shape (`ModelSpec`), the canonical
names of its weights, and the store the weights are read from (`WeightStore`). Architectures
(arch/) fill a ModelSpec from a Hugging Face config; readers (hf.py, gguf_file.py) give a store."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from qnnrt.errors import FormatError
from qnnrt.formats.genie import RopeScaling


class ConvertError(FormatError):
    """A model cannot be converted as given (bad file, unsupported architecture, bad option)."""


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer in the Llama mould: RMSNorm, RoPE (rotate-half), GQA attention,
    SiLU-gated MLP; optional q/k/v bias (Qwen2), q/k RMSNorm per head (Qwen3), tied embeddings, an
    lm head bias (`lm_bias`: the Genie test bundles' tiny model)."""
    architecture: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    eps: float
    rope_theta: float
    max_positions: int
    tied: bool
    qkv_bias: bool = False
    qk_norm: bool = False
    head_bias: bool = False
    rope_scaling: RopeScaling | None = None
    bos: int | None = None
    eos: tuple[int, ...] = field(default_factory=tuple)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every canonical weight and its shape as the graphs use it ([in, out] for projections)."""
        H, D, F = self.hidden, self.head_dim, self.ffn
        out: dict[str, tuple[int, ...]] = {"embed": (self.vocab, H), "norm": (H,)}
        if not self.tied:
            out["lm_head"] = (H, self.vocab)
        if self.head_bias:
            out["lm_bias"] = (self.vocab,)
        for i in range(self.layers):
            out.update({f"l{i}.attn_norm": (H,), f"l{i}.wq": (H, self.heads * D),
                        f"l{i}.wk": (H, self.kv_heads * D), f"l{i}.wv": (H, self.kv_heads * D),
                        f"l{i}.wo": (self.heads * D, H), f"l{i}.mlp_norm": (H,), f"l{i}.wg": (H, F),
                        f"l{i}.wu": (H, F), f"l{i}.wd": (F, H)})
            if self.qkv_bias:
                out.update({f"l{i}.bq": (self.heads * D,), f"l{i}.bk": (self.kv_heads * D,),
                            f"l{i}.bv": (self.kv_heads * D,)})
            if self.qk_norm:
                out.update({f"l{i}.q_norm": (D,), f"l{i}.k_norm": (D,)})
        return out

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["eos"] = list(self.eos)
        d["rope_scaling"] = None if self.rope_scaling is None else dict(vars(self.rope_scaling))
        return d


class WeightStore(Protocol):
    """Canonical weights by name, float32, shape checked against the spec (errors name the file and
    the source tensor)."""

    def get(self, name: str) -> np.ndarray: ...


class CheckedWeights:
    """A store's weights checked against `spec.shapes()` on every read: a missing tensor or a wrong
    shape is a ConvertError naming where the weight comes from."""

    def __init__(self, spec: ModelSpec, store: WeightStore, where) -> None:
        self.spec, self.store, self.where = spec, store, where
        self.expected = spec.shapes()

    def __getitem__(self, name: str) -> np.ndarray:
        want = self.expected.get(name)
        if want is None:
            raise KeyError(name)
        w = self.store.get(name)
        if tuple(w.shape) != want:
            raise ConvertError(f"{self.where(name)} has shape {list(w.shape)}; the config "
                               f"({self.spec.architecture}) implies {list(want)}")
        if not np.isfinite(w).all():
            raise ConvertError(f"{self.where(name)} holds NaN or infinite values; the checkpoint is damaged")
        return w

    def __contains__(self, name: str) -> bool:
        return name in self.expected

    def keys(self) -> list[str]:
        return list(self.expected)
