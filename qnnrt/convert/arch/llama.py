"""The Llama family (LlamaForCausalLM: Llama 2 / 3.x with llama3 rope scaling, SmolLM / SmolLM2,
TinyLlama...): tied or untied embeddings, no biases. llama.cpp stores its Q/K rows permuted."""
from __future__ import annotations

from qnnrt.convert.arch.registry import Architecture, register
from qnnrt.convert.arch.common import llama_like

LLAMA = register(Architecture(
    name="llama", hf_classes=("LlamaForCausalLM",), gguf_arch="llama", gguf_permuted=True,
    spec=lambda cfg, where: llama_like(cfg, where, "LlamaForCausalLM")))
