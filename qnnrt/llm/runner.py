"""LlmRunner: an LLM program loaded by qnnrt (ExecuTorch Qualcomm layout) driven by the generate
and score loops, numpy in and out, through prepared methods (llm/prepared.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from qnnrt.llm.errors import LayoutError
from qnnrt.llm.kv_cache import KVCache
from qnnrt.formats.genie import GenieConfig
from qnnrt.formats.lora import read_slots
from qnnrt.llm.genie_layout import genie_layout
from qnnrt.llm.layout import DECODE_METHOD, PREFILL_METHOD, IOTensor, LlmLayout
from qnnrt.llm.loops import (PLAIN, CycleCounter, DecodeStrategy, GenerationResult, GenericSteps, ScoreResult,
                             Steps, generate, score)
from qnnrt.llm.lora import AdapterSet, AdapterSteps
from qnnrt.llm.prepared import PreparedSteps
from qnnrt.llm.sampling import Sampler
from qnnrt.llm.speculative import SpeculativeOptions, strategy_for
from qnnrt.llm.quant import QuantParams
from qnnrt.runtime.method import UnavailableMethod
from qnnrt.runtime.method_spec import IOSpec
from qnnrt.runtime.plan import NotPreparable
from qnnrt.runtime.program import Program


def io_tensor(spec: IOSpec) -> IOTensor:
    """A method tensor with the encoding of the QNN tensor behind it (fixed point)."""
    q = spec.tensor.quantization if spec.tensor is not None and spec.tensor.is_fixed_point else None
    quant = None
    if q is not None and q.scale > 0:
        quant = QuantParams(float(q.scale), -int(q.offset), np.dtype(spec.dtype))
    return IOTensor(spec.name, tuple(int(d) for d in spec.shape), np.dtype(spec.dtype), quant)


def genie_layout_of(program: Program, config: GenieConfig) -> LlmLayout:
    """The layout of a Genie bundle (llm/genie_layout.py) from its config and its variants' I/O."""
    methods: dict[str, tuple[list[IOTensor], list[IOTensor]]] = {}
    for name, m in program.methods.items():
        if isinstance(m, UnavailableMethod):
            raise LayoutError(f"{program.path}: method {name!r} cannot run: {m.reason}")
        methods[name] = ([io_tensor(s) for s in m.inputs], [io_tensor(s) for s in m.outputs])
    return genie_layout(config, methods, adapter_names=lora_input_names(config))


def lora_input_names(config: GenieConfig) -> frozenset[str]:
    """The LoRA graph inputs the bundle's record declares (formats/lora.py; none: empty)."""
    slots = read_slots(Path(config.config_path).parent)
    return frozenset(slots.inputs()) if slots is not None else frozenset()


def layout_of(program: Program) -> LlmLayout:
    """The LLM layout of a loaded program: a Genie bundle's from its config and graphs, else from
    the constant methods and method I/O (LayoutError when it is not an ExecuTorch Qualcomm LLM
    program of a supported layout)."""
    if program.genie is not None:
        return genie_layout_of(program, program.genie)
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
    """Prefill + decode (or a teacher-forced score pass) over a loaded program.

    By default every call goes through prepared methods (llm/prepared.py: the graph calls bound
    once to the KV caches and small persistent buffers); `prepared=False`, or a method the planner
    cannot bind (`note` says why), goes through ``Program.run``. A call without a cache uses the
    runner's own, zeroed first (fresh, as a new one would be). The contexts the methods use are
    created here, as the residency policy allows (`create_contexts`), so the first token measures
    prefill, not loading.

    A runner runs one generation at a time: its step buffers, measured costs and lookahead state
    are its own (serve's engine thread is its one caller).

    `speculative` decodes with drafts verified by the file's multi-token method (llm/speculative.py)
    in every generation; `cycles` reads what QNN's profile counted (the decode phase's cycles and
    graph executions are reported)."""

    def __init__(self, program: Program, layout: LlmLayout | None = None, *, prepared: bool = True,
                 create_contexts: bool = True, speculative: SpeculativeOptions | None = None,
                 cycles: CycleCounter | None = None):
        self.program = program
        self.layout = layout or layout_of(program)
        self.calls: dict[str, int] = {}
        self.strategy: DecodeStrategy = PLAIN if speculative is None else strategy_for(self.layout, speculative)
        self.cycles = cycles
        self.note: str | None = None if prepared else "prepared=False"
        self.steps: Steps = GenericSteps(self.run, self.layout)
        self._own: KVCache | None = None
        self.adapters = adapter_set(program, self.layout)
        if prepared:
            try:
                steps = (PreparedSteps(program, self.layout, self.calls) if self.adapters is None
                         else AdapterSteps(program, self.layout, self.calls, self.adapters))
                self._own = steps.new_cache()
                self.steps = steps
            except NotPreparable as e:
                self.note = str(e)
        if create_contexts:
            program.create_contexts([self.layout.prefill.name, self.layout.decode.name])

    @property
    def prepared(self) -> bool:
        return isinstance(self.steps, PreparedSteps)

    def run(self, method: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One call of a method through ``Program.run`` (the generic path)."""
        self.calls[method] = self.calls.get(method, 0) + 1
        if self.adapters is not None:
            inputs = {**inputs, **self.adapters.arrays()}
        return self.program.run(method, dict(inputs))

    def new_cache(self) -> KVCache:
        """A KV cache for this runner: in the program's buffers and bound now when prepared."""
        if isinstance(self.steps, PreparedSteps):
            return self.steps.new_cache()
        return KVCache(self.layout)

    def _cache(self, cache: KVCache | None) -> KVCache:
        if cache is not None:
            return cache
        if self._own is None:
            return KVCache(self.layout)
        self._own.reset()
        return self._own

    def generate(self, prompt: Sequence[int], max_new_tokens: int, *,
                 sampler: Sampler | Callable[[np.ndarray], int] | None = None,
                 eos_ids: Sequence[int] | None = None, seq_len: int | None = None,
                 on_token: Callable[[int], bool | None] | None = None, keep_logits: bool = False,
                 cache: KVCache | None = None, context: Sequence[int] = ()) -> GenerationResult:
        """`context`: the tokens `cache` already holds (a draft may quote them)."""
        return generate(self.steps, self.layout, prompt, max_new_tokens, sampler=sampler, eos_ids=eos_ids,
                        seq_len=seq_len, on_token=on_token, keep_logits=keep_logits,
                        cache=self._cache(cache), strategy=self.strategy, context=context, cycles=self.cycles,
                        tracer=self.program.tracer)

    def score(self, tokens: Sequence[int], *, n_prefill: int | None = None,
              cache: KVCache | None = None) -> ScoreResult:
        return score(self.steps, self.layout, tokens, n_prefill=n_prefill, cache=self._cache(cache),
                     tracer=self.program.tracer)


def adapter_set(program: Program, layout: LlmLayout) -> AdapterSet | None:
    """The LoRA adapters of a bundle whose graphs take them (llm/lora.py), else None."""
    specs = layout.decode.adapter_inputs
    if not specs or program.genie is None:
        return None
    slots = read_slots(Path(program.genie.config_path).parent)
    assert slots is not None     # the layout found adapter inputs through the record
    return AdapterSet(slots, specs, program.buffer)
