"""Reading a Hugging Face config dict into a ModelSpec: the keys every Llama-like model shares,
each checked with an error naming the file and the key."""
from __future__ import annotations

from qnnrt.convert.spec import ConvertError, ModelSpec
from qnnrt.formats.genie import RopeScaling


def _int(cfg: dict, key: str, where: str, default: int | None = None) -> int:
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ConvertError(f"{where}: {key} is {v!r}; a positive integer is needed")
    return v


def _num(cfg: dict, key: str, where: str, default: float) -> float:
    v = cfg.get(key, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ConvertError(f"{where}: {key} is {v!r}; a positive number is needed")
    return float(v)


def rope_scaling(cfg: dict, where: str) -> RopeScaling | None:
    """Llama 3's scaling, or none; any other rope type is refused naming it."""
    rs = cfg.get("rope_scaling")
    if rs is None:
        return None
    if not isinstance(rs, dict):
        raise ConvertError(f"{where}: rope_scaling is {rs!r}; an object or null is needed")
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return None
    if kind != "llama3":
        raise ConvertError(f"{where}: rope_scaling type {kind!r} is not supported; qnnrt convert "
                           f"supports 'llama3' scaling (or none)")
    return RopeScaling("llama3", _num(rs, "factor", where, 8.0), _num(rs, "low_freq_factor", where, 1.0),
                       _num(rs, "high_freq_factor", where, 4.0),
                       _int(rs, "original_max_position_embeddings", where, 8192))


def _ids(v, where: str, key: str, vocab: int) -> tuple[int, ...]:
    items = v if isinstance(v, list) else [] if v is None else [v]
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab for i in items):
        raise ConvertError(f"{where}: {key} is {v!r}; token ids below vocab_size {vocab} are needed")
    return tuple(items)


def llama_like(cfg: dict, where: str, name: str, *, qkv_bias: bool = False, qk_norm: bool = False,
               tied_default: bool = False) -> ModelSpec:
    """The ModelSpec of a Llama-shaped config (Llama, Qwen2, Qwen3 differ in the flags)."""
    hidden = _int(cfg, "hidden_size", where)
    heads = _int(cfg, "num_attention_heads", where)
    kv_heads = _int(cfg, "num_key_value_heads", where, heads)
    if heads % kv_heads:
        raise ConvertError(f"{where}: num_attention_heads {heads} is not a multiple of "
                           f"num_key_value_heads {kv_heads}")
    head_dim = cfg.get("head_dim") or hidden // heads
    if not isinstance(head_dim, int) or head_dim % 2 or head_dim <= 0:
        raise ConvertError(f"{where}: head_dim is {head_dim!r}; an even positive integer is needed")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ConvertError(f"{where}: hidden_act {act!r} is not supported; {name} converts with 'silu'")
    if cfg.get("attention_bias") and not qkv_bias:
        raise ConvertError(f"{where}: attention_bias true is not supported for {name}")
    vocab = _int(cfg, "vocab_size", where)
    return ModelSpec(
        architecture=name, vocab=vocab, hidden=hidden, layers=_int(cfg, "num_hidden_layers", where),
        heads=heads, kv_heads=kv_heads, head_dim=head_dim, ffn=_int(cfg, "intermediate_size", where),
        eps=_num(cfg, "rms_norm_eps", where, 1e-6), rope_theta=_num(cfg, "rope_theta", where, 10000.0),
        max_positions=_int(cfg, "max_position_embeddings", where, 2048),
        tied=bool(cfg.get("tie_word_embeddings", tied_default)), qkv_bias=qkv_bias, qk_norm=qk_norm,
        rope_scaling=rope_scaling(cfg, where),
        bos=(_ids(cfg.get("bos_token_id"), where, "bos_token_id", vocab) or (None,))[0],
        eos=_ids(cfg.get("eos_token_id"), where, "eos_token_id", vocab))
