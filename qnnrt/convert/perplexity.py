"""Perplexity of a fixed text: how the accuracy of a converted bundle (fp16, w8a16) is judged against
the float model it came from. The bundle's side is the LLM runner's own teacher-forced score
(llm/loops.py `score`: the text through the prompt graph in AR-token windows that advance the KV
cache, as prefill does); the float side is the numpy reference (reference.py) on the source's weights.
Both score the same ids: the bundle's tokenizer and BOS rule (llm/text.py `TextModel.prompt_ids`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from qnnrt.convert import reference
from qnnrt.convert.spec import ModelSpec
from qnnrt.errors import InputError
from qnnrt.llm.sampling import log_softmax

if TYPE_CHECKING:
    from qnnrt.llm.runner import LlmRunner


@dataclass(frozen=True)
class Perplexity:
    """exp(mean negative log-likelihood) of tokens[1:] each given the tokens before it."""
    logprobs: tuple[float, ...]     # log p(ids[i+1] | ids[:i+1])

    @property
    def nll(self) -> float:
        return -float(np.mean(self.logprobs))

    @property
    def perplexity(self) -> float:
        return float(np.exp(self.nll))

    def relative_to(self, other: Perplexity) -> float:
        """This perplexity over ``other``'s, minus 1 (0.05: 5% higher)."""
        return self.perplexity / other.perplexity - 1.0


def _checked(ids: Sequence[int], vocab: int) -> list[int]:
    out = [int(t) for t in ids]
    if len(out) < 2:
        raise InputError(f"perplexity needs at least 2 tokens, got {len(out)}")
    bad = [t for t in out if not 0 <= t < vocab]
    if bad:
        raise InputError(f"token id {bad[0]} is outside the model's vocabulary of {vocab}")
    return out


def of_reference(spec: ModelSpec, weights, ids: Sequence[int]) -> Perplexity:
    """The float model's perplexity (float64 numpy, the whole sequence at once, no cache).

    Parameters: ``weights`` the canonical weights (``Source.weights``); ``ids`` the scored text.
    Returns: the Perplexity over ids[1:]."""
    toks = _checked(ids, spec.vocab)
    w = {k: np.asarray(weights[k], np.float64) for k in spec.shapes()}
    lp = log_softmax(reference.logits(spec, w, toks[:-1]))
    return Perplexity(tuple(float(lp[i, t]) for i, t in enumerate(toks[1:])))


def of_runner(runner: LlmRunner, ids: Sequence[int]) -> Perplexity:
    """A loaded bundle's perplexity through qnnrt's runner: all but the last id prefilled through the
    prompt graph when they fit in it (context - AR), the rest through the token graph.

    Parameters: ``runner`` an LlmRunner over the loaded bundle; ``ids`` the scored text.
    Returns: the Perplexity over ids[1:]."""
    toks = _checked(ids, runner.layout.vocab_size)
    return Perplexity(tuple(runner.score(toks).logprobs))
