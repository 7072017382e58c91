"""LLM runner for ExecuTorch Qualcomm LLM programs (what ExecuTorch's ``qnn_llama_runner`` does):
layout from the constant methods and I/O, the smart-mask KV cache, sampling, generate and score.

    with qnnrt.load("model.pte") as prog:
        r = LlmRunner(prog)
        out = r.generate([1, 15, 493], max_new_tokens=16)
"""
from qnnrt.llm.errors import ContextLengthError, LayoutError
from qnnrt.llm.kv_cache import KVCache, build_mask, build_step_inputs
from qnnrt.llm.layout import LlmLayout, MethodLayout
from qnnrt.llm.loops import GenerationResult, ScoreResult, generate, score
from qnnrt.llm.quant import QuantParams, parse_quant_attr
from qnnrt.llm.runner import LlmRunner, layout_of
from qnnrt.llm.sampling import Sampler, SamplingOptions, log_softmax

__all__ = ["ContextLengthError", "GenerationResult", "KVCache", "LayoutError", "LlmLayout", "LlmRunner",
           "MethodLayout", "QuantParams", "ScoreResult", "Sampler", "SamplingOptions", "build_mask",
           "build_step_inputs", "generate", "layout_of", "log_softmax", "parse_quant_attr", "score"]
