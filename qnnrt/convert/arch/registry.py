"""The registry of the architectures `qnnrt convert` knows (each module of this package adds one with
`@register`), and the checkpoint names of the canonical weights."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from qnnrt.convert.spec import ConvertError, ModelSpec

_REGISTRY: dict[str, "Architecture"] = {}


@dataclass(frozen=True)
class Architecture:
    """``name`` as qnnrt says it; ``hf_classes`` the config's "architectures" entries it takes;
    ``gguf_arch`` llama.cpp's ``general.architecture``; ``spec`` reads a config dict;
    ``hf_names`` maps a canonical weight name to the checkpoint's (with ``transposed``: stored
    [out, in]); ``gguf_permuted``: llama.cpp stores Q and K rows interleaved for this arch."""
    name: str
    hf_classes: tuple[str, ...]
    gguf_arch: str
    spec: Callable[[dict, str], ModelSpec]
    qkv_bias: bool = False
    qk_norm: bool = False
    gguf_permuted: bool = False


def register(arch: Architecture) -> Architecture:
    """Add ``arch`` to the registry (its HF classes and GGUF name must be new)."""
    for key in (*arch.hf_classes, f"gguf:{arch.gguf_arch}"):
        if key in _REGISTRY:
            raise ValueError(f"architecture {key} registered twice")
        _REGISTRY[key] = arch
    return arch


def supported() -> list[str]:
    return sorted(k for k in _REGISTRY if not k.startswith("gguf:"))


def by_hf_class(name: str, where: str) -> Architecture:
    arch = _REGISTRY.get(name)
    if arch is None or name.startswith("gguf:"):
        raise ConvertError(f"{where}: architecture {name!r} is not supported; qnnrt convert supports "
                           f"{', '.join(supported())}")
    return arch


def by_gguf(name: str, where: str) -> Architecture:
    arch = _REGISTRY.get(f"gguf:{name}")
    if arch is None:
        gguf = sorted(k[5:] for k in _REGISTRY if k.startswith("gguf:"))
        raise ConvertError(f"{where}: GGUF architecture {name!r} is not supported; qnnrt convert "
                           f"supports {', '.join(gguf)}")
    return arch


def hf_name(canonical: str) -> tuple[str, bool]:
    """The Hugging Face tensor of a canonical weight, and whether it is stored [out, in]."""
    if canonical == "embed":
        return "model.embed_tokens.weight", False
    if canonical == "norm":
        return "model.norm.weight", False
    if canonical == "lm_head":
        return "lm_head.weight", True
    layer, what = canonical[1:].split(".", 1)
    p = f"model.layers.{layer}."
    names = {"attn_norm": "input_layernorm.weight", "mlp_norm": "post_attention_layernorm.weight",
             "wq": "self_attn.q_proj.weight", "wk": "self_attn.k_proj.weight",
             "wv": "self_attn.v_proj.weight", "wo": "self_attn.o_proj.weight",
             "bq": "self_attn.q_proj.bias", "bk": "self_attn.k_proj.bias", "bv": "self_attn.v_proj.bias",
             "q_norm": "self_attn.q_norm.weight", "k_norm": "self_attn.k_norm.weight",
             "wg": "mlp.gate_proj.weight", "wu": "mlp.up_proj.weight", "wd": "mlp.down_proj.weight"}
    return p + names[what], what in ("wq", "wk", "wv", "wo", "wg", "wu", "wd")


def gguf_name(canonical: str) -> tuple[str, bool]:
    """llama.cpp's tensor of a canonical weight, and whether it is stored [out, in]."""
    if canonical == "embed":
        return "token_embd.weight", False
    if canonical == "norm":
        return "output_norm.weight", False
    if canonical == "lm_head":
        return "output.weight", True
    layer, what = canonical[1:].split(".", 1)
    names = {"attn_norm": "attn_norm.weight", "mlp_norm": "ffn_norm.weight", "wq": "attn_q.weight",
             "wk": "attn_k.weight", "wv": "attn_v.weight", "wo": "attn_output.weight",
             "bq": "attn_q.bias", "bk": "attn_k.bias", "bv": "attn_v.bias",
             "q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight",
             "wg": "ffn_gate.weight", "wu": "ffn_up.weight", "wd": "ffn_down.weight"}
    return f"blk.{layer}.{names[what]}", what in ("wq", "wk", "wv", "wo", "wg", "wu", "wd")
