"""`qnnrt convert`: a Hugging Face folder or a GGUF file of a supported LLM (the Llama family,
Qwen2 / Qwen2.5, Qwen3) to a Genie bundle that qnnrt and Qualcomm's libGenie.so run.

    report = qnnrt.convert.convert("SmolLM2-135M-Instruct", "smollm2_bundle",
                                   ConvertOptions(context=1024, precision="fp16"))

Modules: source.py (what is read: hf.py over formats/safetensors_file.py, gguf_file.py), arch/ (the
architecture registry), reference.py (the numpy float model), graphs.py (the part graphs),
quantize.py (w8a16), compile_parts.py, bundle_files.py, pipeline.py (the whole run)."""
from __future__ import annotations

from qnnrt.convert.options import ConvertOptions
from qnnrt.convert.pipeline import ConvertReport, convert
from qnnrt.convert.source import Source, open_model
from qnnrt.convert.spec import ConvertError, ModelSpec

__all__ = ["ConvertError", "ConvertOptions", "ConvertReport", "ModelSpec", "Source", "convert", "open_model"]
