"""The small files of a Genie bundle as Qualcomm AI Hub writes them (qai_hub_models
utils/llm_helpers.py create_genie_config, save_htp_config_for_genie_bundle): genie_config.json
(context, vocab, BOS / EOS, the sampler from generation_config.json, RoPE), the HTP backend
extensions, the chat template, and qnnrt's record of where the bundle came from."""
from __future__ import annotations

from qnnrt.convert.spec import ModelSpec


def sampler(generation: dict) -> dict:
    """generation_config.json's sampling as Genie's sampler (greedy when it does not sample)."""
    if not generation.get("do_sample", False):
        return {"version": 1, "seed": 42, "temp": 1.0, "top-k": 1, "top-p": 1.0}
    return {"version": 1, "seed": 42, "temp": float(generation.get("temperature", 1.0) or 1.0),
            "top-k": int(generation.get("top_k", 0) or 0), "top-p": float(generation.get("top_p", 1.0) or 1.0)}


def positional_encoding(spec: ModelSpec) -> dict:
    pe: dict = {"type": "rope", "rope-dim": spec.head_dim // 2, "rope-theta": spec.rope_theta}
    s = spec.rope_scaling
    if s is not None:
        pe["rope-scaling"] = {"rope-type": s.rope_type, "factor": s.factor, "low-freq-factor": s.low_freq_factor,
                              "high-freq-factor": s.high_freq_factor,
                              "original-max-position-embeddings": s.original_max_positions}
    return pe


def genie_config(spec: ModelSpec, context: int, bins: list[str], generation: dict,
                 eos: tuple[int, ...]) -> dict:
    """genie_config.json of a 'basic' dialog over the part binaries ``bins``."""
    ctx: dict = {"version": 1, "size": context, "n-vocab": spec.vocab}
    if spec.bos is not None:
        ctx["bos-token"] = spec.bos
    if eos:
        ctx["eos-token"] = list(eos) if len(eos) > 1 else eos[0]
    return {"dialog": {
        "version": 1, "type": "basic", "context": ctx, "sampler": sampler(generation),
        "tokenizer": {"version": 1, "path": "tokenizer.json"},
        "engine": {
            "version": 1, "n-threads": 3,
            "backend": {"version": 1, "type": "QnnHtp",
                        "QnnHtp": {"version": 1, "use-mmap": False, "spill-fill-bufsize": 0, "mmap-budget": 0,
                                   "poll": False, "cpu-mask": "0xe0", "kv-dim": spec.head_dim,
                                   "allow-async-init": False},
                        "extensions": "htp_backend_ext_config.json"},
            "model": {"version": 1, "type": "binary", "binary": {"version": 1, "ctx-bins": bins},
                      "positional-encoding": positional_encoding(spec)}}}}


def htp_config(soc_model: int, arch: int | None, weight_sharing: bool) -> dict:
    device: dict = {"soc_model": soc_model}
    if arch is not None:
        device["dsp_arch"] = f"v{arch}"
    device["cores"] = [{"core_id": 0, "perf_profile": "burst", "rpc_control_latency": 100}]
    return {"devices": [device], "memory": {"mem_type": "shared_buffer"},
            "context": {"weight_sharing_enabled": weight_sharing}}


def tokenizer_config(chat_template: str | None, tcfg: dict) -> dict:
    """tokenizer_config.json beside tokenizer.json: the chat template and the special tokens'
    text, so `qnnrt serve BUNDLE` chats with no other folder."""
    keep = {k: tcfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token", "add_bos_token",
                                 "add_eos_token", "clean_up_tokenization_spaces") if k in tcfg}
    if chat_template is not None:
        keep["chat_template"] = chat_template
    return keep
