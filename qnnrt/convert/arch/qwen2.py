"""Qwen2 / Qwen2.5 (Qwen2ForCausalLM): Llama with a bias on the q, k and v projections."""
from __future__ import annotations

from qnnrt.convert.arch.registry import Architecture, register
from qnnrt.convert.arch.common import llama_like

QWEN2 = register(Architecture(
    name="qwen2", hf_classes=("Qwen2ForCausalLM",), gguf_arch="qwen2", qkv_bias=True,
    spec=lambda cfg, where: llama_like(cfg, where, "Qwen2ForCausalLM", qkv_bias=True)))
