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


# canonical weight -> (Hugging Face's tensor, llama.cpp's); a layer's under model.layers.<i>. / blk.<i>.
_NAMES = {"embed": ("model.embed_tokens.weight", "token_embd.weight"),
          "norm": ("model.norm.weight", "output_norm.weight"), "lm_head": ("lm_head.weight", "output.weight")}
_LAYER_NAMES = {
    "attn_norm": ("input_layernorm.weight", "attn_norm.weight"),
    "mlp_norm": ("post_attention_layernorm.weight", "ffn_norm.weight"),
    "wq": ("self_attn.q_proj.weight", "attn_q.weight"), "wk": ("self_attn.k_proj.weight", "attn_k.weight"),
    "wv": ("self_attn.v_proj.weight", "attn_v.weight"), "wo": ("self_attn.o_proj.weight", "attn_output.weight"),
    "bq": ("self_attn.q_proj.bias", "attn_q.bias"), "bk": ("self_attn.k_proj.bias", "attn_k.bias"),
    "bv": ("self_attn.v_proj.bias", "attn_v.bias"),
    "q_norm": ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    "k_norm": ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    "wg": ("mlp.gate_proj.weight", "ffn_gate.weight"), "wu": ("mlp.up_proj.weight", "ffn_up.weight"),
    "wd": ("mlp.down_proj.weight", "ffn_down.weight")}
_OUT_IN = {"lm_head", "wq", "wk", "wv", "wo", "wg", "wu", "wd"}       # stored [out, in] by both


def _stored_name(canonical: str, which: int, layer_prefix: str) -> tuple[str, bool]:
    if canonical in _NAMES:
        return _NAMES[canonical][which], canonical in _OUT_IN
    layer, what = canonical[1:].split(".", 1)
    return layer_prefix.format(layer) + _LAYER_NAMES[what][which], what in _OUT_IN


def hf_name(canonical: str) -> tuple[str, bool]:
    """The Hugging Face tensor of a canonical weight, and whether it is stored [out, in]."""
    return _stored_name(canonical, 0, "model.layers.{}.")


def gguf_name(canonical: str) -> tuple[str, bool]:
    """llama.cpp's tensor of a canonical weight, and whether it is stored [out, in]."""
    return _stored_name(canonical, 1, "blk.{}.")
