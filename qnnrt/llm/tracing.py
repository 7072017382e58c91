"""An LLM generation in the run's trace (runtime/hooks.py `Tracing`, a `profiling.Tracer`): the
loops time their phases themselves (prefill chunks, each decode forward or verification with what it
drafted and accepted); these wrappers time the sampling and the grammar mask, which run inside
them. Used only when the program traces."""
from __future__ import annotations

from typing import Callable

import numpy as np

from qnnrt.llm.sampling import TokenConstraint, verify_token
from qnnrt.runtime.hooks import Tracing

__all__ = ["Tracing", "TracedSampler", "TracedConstraint"]


class TracedSampler:
    """A sampler (any callable, and its `verify` when it has one) whose choices are slices."""

    def __init__(self, sampler: Callable[[np.ndarray], int], tracer: Tracing) -> None:
        self.sampler, self.tracer = sampler, tracer

    def __call__(self, logits: np.ndarray) -> int:
        t0 = self.tracer.now()
        tok = self.sampler(logits)
        self.tracer.span("sample", "llm", t0, {"token": int(tok)})
        return tok

    def verify(self, logits: np.ndarray, draft: int) -> int:
        t0 = self.tracer.now()
        tok = verify_token(self.sampler, logits, draft)
        self.tracer.span("sample (verify a draft token)", "llm", t0,
                         {"draft": int(draft), "token": tok})
        return tok


class TracedConstraint:
    """A token constraint (a grammar matcher) whose masks are slices."""

    def __init__(self, constraint: TokenConstraint, tracer: Tracing) -> None:
        self.constraint, self.tracer = constraint, tracer

    def allowed(self, vocab_size: int) -> np.ndarray | None:
        t0 = self.tracer.now()
        mask = self.constraint.allowed(vocab_size)
        self.tracer.span("grammar mask", "llm", t0,
                         {"allowed": None if mask is None else int(np.count_nonzero(mask))})
        return mask

    def accept(self, token: int) -> None:
        self.constraint.accept(token)
