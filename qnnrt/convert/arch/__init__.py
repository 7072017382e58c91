"""The architectures `qnnrt convert` knows, one module each, registered with `@register`: what a
Hugging Face config (or a GGUF's metadata, mapped onto the same keys) means as a `ModelSpec`,
and which checkpoint tensor holds each canonical weight. A new architecture is one new module here
(imported below) with one `@register` (registry.py)."""
from __future__ import annotations

from qnnrt.convert.arch.registry import (Architecture, by_gguf, by_hf_class, gguf_name, hf_name, register,
                                         supported)
from qnnrt.convert.arch import llama, qwen2, qwen3  # noqa: F401  (each registers itself)

__all__ = ["Architecture", "by_gguf", "by_hf_class", "gguf_name", "hf_name", "register", "supported"]
