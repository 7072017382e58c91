"""Qwen3 (Qwen3ForCausalLM): Llama with an RMSNorm over each head's query and key before RoPE, and
a head_dim of its own (not hidden / heads)."""
from __future__ import annotations

from qnnrt.convert.arch.registry import Architecture, register
from qnnrt.convert.arch.common import llama_like

QWEN3 = register(Architecture(
    name="qwen3", hf_classes=("Qwen3ForCausalLM",), gguf_arch="qwen3", qk_norm=True,
    spec=lambda cfg, where: llama_like(cfg, where, "Qwen3ForCausalLM", qk_norm=True)))
