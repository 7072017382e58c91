"""Generation that keeps one KV cache across calls: a prompt that extends the tokens the cache holds
(the next turn of a chat) prefills only the tokens after the shared prefix. With LoRA adapters
(llm/lora.py) the cache is kept per adapter: entries one adapter wrote are never reused under another."""
from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import numpy as np

from qnnrt.errors import InputError

from qnnrt.llm.drafting import shared_prefix
from qnnrt.llm.kv_cache import KVCache
from qnnrt.llm.loops import GenerationResult
from qnnrt.llm.runner import LlmRunner


class CachedGenerator:
    """An LlmRunner with a KV cache that outlives one generation. ``tokens`` are the ids whose
    entries the cache holds (prompt + generated, less the last generated token, never fed back)."""

    def __init__(self, runner: LlmRunner):
        self.runner = runner
        self.cache: KVCache = runner.new_cache()
        self.tokens: list[int] = []
        # the adapter whose entries `cache` holds
        self.adapter: str | None = runner.adapters.active if runner.adapters is not None else None
        self._parked: dict[str | None, tuple[KVCache, list[int]]] = {}

    def use_adapter(self, name: str | None) -> None:
        """Generate with LoRA adapter ``name`` (None: none) from now on, with that adapter's own cache
        (made on its first use). InputError for an adapter the runner has not loaded."""
        if self.runner.adapters is None:
            if name is not None:
                raise InputError(f"no adapter {name!r}: this model takes no LoRA adapters")
            return
        self.runner.adapters.use(name)
        if name != self.adapter:
            self._parked[self.adapter] = (self.cache, self.tokens)
            parked = self._parked.pop(name, None)
            self.cache, self.tokens = parked if parked is not None else (self.runner.new_cache(), [])
            self.adapter = name

    def forget(self) -> None:
        self.cache.truncate(0)
        self.tokens = []

    def generate(self, prompt: Sequence[int], max_new_tokens: int, *,
                 sampler: Callable[[np.ndarray], int] | None = None,
                 eos_ids: Sequence[int] | None = None, on_token: Callable[[int], bool | None] | None = None,
                 reuse: bool = True) -> tuple[GenerationResult, int]:
        """(result, reused): ``reused`` prompt tokens came from the cache; the result's
        prompt_tokens are the ones prefilled. At least one prompt token is always prefilled (its
        logits give the first new token)."""
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise InputError("empty prompt")
        if self.runner.adapters is not None and self.runner.adapters.active != self.adapter:
            self.use_adapter(self.runner.adapters.active)     # switched on the runner itself
        reused = min(shared_prefix(self.tokens, prompt), len(prompt) - 1) if reuse else 0
        self.cache.truncate(reused)
        self.tokens = prompt[:reused]
        with contextlib.ExitStack() as undo:
            undo.callback(self.forget)  # a call may have stopped half-way: trust nothing in the cache
            res = self.runner.generate(prompt[reused:], max_new_tokens, sampler=sampler, eos_ids=eos_ids,
                                       on_token=on_token, cache=self.cache, context=self.tokens)
            undo.pop_all()
        self.tokens = (prompt + res.tokens)[:self.cache.n_past]
        return res, reused
