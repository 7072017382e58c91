"""Token sampling: greedy, temperature with top-k / top-p, seeded."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qnnrt.errors import InputError

@dataclass
class Sampler:
    """temperature 0 -> greedy (first maximum, like ExecuTorch's argmax); else softmax(logits / t) over
    the top_k best (0 = all) and, if 0 < top_p < 1, the nucleus; drawn from a seeded numpy Generator."""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self):
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise InputError("temperature >= 0, top_k >= 0 and 0 < top_p <= 1 required")
        self.rng = np.random.default_rng(self.seed)

    def __call__(self, logits: np.ndarray) -> int:
        x = np.asarray(logits, dtype=np.float64).reshape(-1)
        if self.temperature == 0:
            return int(np.argmax(x))
        x = x / self.temperature
        order = np.argsort(-x, kind="stable")
        if 0 < self.top_k < x.size:
            order = order[:self.top_k]
        z = x[order] - x[order[0]]
        p = np.exp(z)
        p /= p.sum()
        if self.top_p < 1:
            keep = int(np.searchsorted(np.cumsum(p), self.top_p) + 1)
            order, p = order[:keep], p[:keep] / p[:keep].sum()
        return int(order[self.rng.choice(p.size, p=p)])


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))

