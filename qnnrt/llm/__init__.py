"""LLM runner for ExecuTorch Qualcomm LLM programs (what ExecuTorch's ``qnn_llama_runner`` does):
layout from the constant methods and I/O, the smart-mask KV cache, sampling, generate and score.

    with qnnrt.load("model.pte") as prog:
        r = LlmRunner(prog)
        out = r.generate([1, 15, 493], max_new_tokens=16)
        # speculative: LlmRunner(prog, speculative=SpeculativeOptions("prompt-lookup"))
"""
from qnnrt.llm.errors import ContextLengthError, LayoutError
from qnnrt.llm.kv_cache import KVCache, build_mask, build_step_inputs
from qnnrt.llm.layout import LlmLayout, MethodLayout
from qnnrt.llm.lookahead import LookaheadOptions
from qnnrt.llm.loops import GenerationResult, ScoreResult, generate, score
from qnnrt.llm.quant import QuantParams, parse_quant_attr
from qnnrt.llm.runner import LlmRunner, layout_of
from qnnrt.llm.sampling import Sampler, SamplingOptions, log_softmax
from qnnrt.llm.speculative import SpeculativeOptions

__all__ = ["ContextLengthError", "GenerationResult", "KVCache", "LayoutError", "LlmLayout", "LlmRunner",
           "LookaheadOptions", "MethodLayout", "QuantParams", "ScoreResult", "Sampler", "SamplingOptions",
           "SpeculativeOptions", "build_mask", "build_step_inputs", "generate", "layout_of", "log_softmax",
           "parse_quant_attr", "score"]
