"""LlmRunner: an LLM program loaded by qnnrt (ExecuTorch Qualcomm layout) driven by the generate
and score loops, numpy in and out, through ``Program.run``."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from qnnrt.llm.errors import LayoutError
from qnnrt.llm.kv_cache import KVCache
from qnnrt.llm.layout import DECODE_METHOD, PREFILL_METHOD, LlmLayout
from qnnrt.llm.loops import GenerationResult, ScoreResult, generate, score
from qnnrt.llm.sampling import Sampler
from qnnrt.runtime.method import UnavailableMethod
from qnnrt.runtime.program import Program


def layout_of(program: Program) -> LlmLayout:
    """The LLM layout of a loaded program, from its constant methods and method I/O (LayoutError
    when it is not an ExecuTorch Qualcomm LLM program of a supported layout)."""
    methods: dict[str, Any] = {}
    for name in (PREFILL_METHOD, DECODE_METHOD):
        m = program.methods.get(name)
        if m is None:
            continue
        if isinstance(m, UnavailableMethod):
            raise LayoutError(f"{program.path}: method {name!r} cannot run: {m.reason}")
        methods[name] = {"inputs": [(s.name, s.shape, s.dtype) for s in m.inputs],
                         "outputs": [(s.name, s.shape, s.dtype) for s in m.outputs]}
    return LlmLayout.from_program(program.constants, methods)


class LlmRunner:
    """Prefill + decode (or a teacher-forced score pass) over a loaded program; the KV cache is
    fresh per call unless one is given."""

    def __init__(self, program: Program, layout: LlmLayout | None = None):
        self.program = program
        self.layout = layout or layout_of(program)
        self.calls: dict[str, int] = {}

    def run(self, method: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One call of a method (the loops' ``run``)."""
        self.calls[method] = self.calls.get(method, 0) + 1
        return self.program.run(method, dict(inputs))

    def generate(self, prompt: Sequence[int], max_new_tokens: int, *,
                 sampler: Sampler | Callable[[np.ndarray], int] | None = None,
                 eos_ids: Sequence[int] | None = None, seq_len: int | None = None,
                 on_token: Callable[[int], bool | None] | None = None, keep_logits: bool = False,
                 cache: KVCache | None = None) -> GenerationResult:
        return generate(self.run, self.layout, prompt, max_new_tokens, sampler=sampler, eos_ids=eos_ids,
                        seq_len=seq_len, on_token=on_token, keep_logits=keep_logits, cache=cache)

    def score(self, tokens: Sequence[int], *, n_prefill: int | None = None,
              cache: KVCache | None = None) -> ScoreResult:
        return score(self.run, self.layout, tokens, n_prefill=n_prefill, cache=cache)
