"""Token sampling: logit bias, penalties, an optional grammar constraint, then greedy or temperature
with top-k / top-p / min-p, seeded.

The order is llama.cpp's where the knobs overlap: bias, then the repetition penalty (CTRL's: a seen
token's positive logit divided by it, a negative one multiplied), then OpenAI's frequency and
presence penalties (``logit - count * frequency - (count > 0) * presence``), then the grammar mask,
then the choice. Penalties count the tokens this sampler chose (OpenAI's "the text so far")."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from collections import Counter, deque
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from qnnrt.errors import InputError

SEED_MODULUS = 1 << 64


class TokenConstraint(Protocol):
    """What a grammar gives the sampler: the tokens allowed next, and the one chosen."""

    def allowed(self, vocab_size: int) -> np.ndarray | None:
        """A boolean mask over the vocabulary (None: every token)."""
        ...

    def accept(self, token: int) -> None:
        ...


@dataclass(frozen=True)
class SamplingOptions:
    """The knobs of one choice. temperature 0 is greedy (first maximum, like ExecuTorch's argmax)."""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    penalty_last_n: int = 0      # 0: penalties count the tokens this sampler chose (OpenAI's); n: the last n
    #                              tokens of the sequence, prompt included, each counted (Genie's penalize-last-n)

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise InputError("temperature >= 0, top_k >= 0 and 0 < top_p <= 1 required")
        if not 0 <= self.min_p <= 1:
            raise InputError("0 <= min_p <= 1 required")
        if self.repetition_penalty <= 0:
            raise InputError("repetition_penalty > 0 required")
        if self.penalty_last_n < 0:
            raise InputError("penalty_last_n >= 0 required")

    def for_choice(self, index: int) -> SamplingOptions:
        """The options of choice ``index`` of a request: the same knobs, a seed of its own derived
        from the request's (choice 0 keeps it), so n choices are distinct and reproducible."""
        if index == 0 or self.seed is None:
            return self
        state = np.random.SeedSequence([self.seed % SEED_MODULUS, index]).generate_state(2, np.uint32)
        return replace(self, seed=int(state[0]) << 32 | int(state[1]))


FLOAT_MAX = float(np.finfo(np.float64).max)


def apply_logit_bias(x: np.ndarray, bias: Mapping[int, float]) -> None:
    """In place: ``x[token] += bias`` (OpenAI's logit_bias)."""
    if bias:
        ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
        x[ids] += np.fromiter(bias.values(), dtype=np.float64, count=len(bias))


def apply_penalties(x: np.ndarray, counts: Mapping[int, int], *, repetition: float = 1.0,
                    frequency: float = 0.0, presence: float = 0.0) -> None:
    """In place, over the tokens in ``counts`` (token -> times chosen so far)."""
    if not counts or (repetition == 1.0 and frequency == 0.0 and presence == 0.0):
        return
    ids = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
    n = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
    seen = x[ids]
    if repetition != 1.0:
        with np.errstate(over="ignore"):       # a tiny penalty: inf, cut to the largest float by the sampler
            seen = np.where(seen > 0, seen / repetition, seen * repetition)
    x[ids] = seen - n * frequency - (n > 0) * presence


class Sampler:
    """Chooses one token from a logits row; remembers what it chose (for the penalties) and tells
    the constraint. A new sampler per generation; `history` is the sequence before it (the prompt),
    which a `penalty_last_n` window counts."""

    def __init__(self, options: SamplingOptions | None = None, constraint: TokenConstraint | None = None,
                 history: Sequence[int] = ()):
        self.options = options or SamplingOptions()
        self.constraint = constraint
        self.rng = np.random.default_rng(None if self.options.seed is None else self.options.seed % SEED_MODULUS)
        self.counts: dict[int, int] = {}
        n = self.options.penalty_last_n
        self.window: deque[int] | None = deque((int(t) for t in history[-n:]), maxlen=n) if n else None
        if self.window is not None:
            self.counts = dict(Counter(self.window))

    def adjusted(self, logits: np.ndarray) -> np.ndarray:
        """The logits after bias, penalties and the constraint's mask (float64, a copy), none past
        the largest float."""
        return self._adjusted(logits)[0]

    def _adjusted(self, logits: np.ndarray) -> tuple[np.ndarray, float]:
        """(adjusted logits, the best of them). A logit past the largest float (a tiny
        repetition_penalty divides one there, or the model's own inf) is cut to it, which keeps it
        the best; the best is found anyway, so only such a row pays a second pass over the vocabulary."""
        o = self.options
        x = np.array(logits, dtype=np.float64).reshape(-1)
        apply_logit_bias(x, o.logit_bias)
        apply_penalties(x, self.counts, repetition=o.repetition_penalty, frequency=o.frequency_penalty,
                        presence=o.presence_penalty)
        if self.constraint is not None:
            allowed = self.constraint.allowed(x.size)
            if allowed is not None:
                x[~allowed] = -np.inf
        best = float(x.max())
        if best > FLOAT_MAX:
            np.minimum(x, FLOAT_MAX, out=x)
            best = FLOAT_MAX
        return x, best

    def __call__(self, logits: np.ndarray) -> int:
        if self.plain_greedy(logits):   # nothing adjusts the row: its first maximum as it is
            i = int(np.argmax(logits))
            best = logits.flat[i]
            if best != best or best == -np.inf:
                raise InputError("no token is allowed here (the grammar and the logit bias leave none)")
            return self._took(i)
        x = self._allowed(logits)
        return self._took(self.choose(x))

    def plain_greedy(self, logits: np.ndarray) -> bool:
        """Greedy with no bias, penalty or constraint over a float row that float64 holds exactly:
        the float64 copy `_adjusted` makes would keep every value and their order (ties and NaN
        included; an inf it cuts to the largest float stays the first maximum), so the argmax of
        the row itself is the same token, without the copy and the pass for the best."""
        o = self.options
        return (o.temperature == 0 and self.constraint is None and not o.logit_bias
                and o.repetition_penalty == 1.0 and o.frequency_penalty == 0.0
                and o.presence_penalty == 0.0 and isinstance(logits, np.ndarray)
                and logits.dtype.kind == "f" and logits.dtype.itemsize <= 8)

    def verify(self, logits: np.ndarray, draft: int) -> int:
        """The token chosen where a draft proposed `draft`: `draft` itself when accepted, else a
        token drawn so that the result follows this sampler's own distribution p exactly (the
        speculative-sampling rule for a draft that is certain: accept with probability p(draft),
        else draw from p with `draft` removed, renormalised). Greedy accepts iff `draft` is the
        argmax. The sampler's state (penalty counts, grammar) advances by the returned token."""
        x = self._allowed(logits)
        if self.options.temperature == 0:
            return self._took(int(np.argmax(x)))
        order, p = self.distribution(x)
        hit = np.flatnonzero(order == draft)
        p_draft = float(p[hit[0]]) if hit.size else 0.0
        if self.rng.random() < p_draft:
            return self._took(int(draft))
        if hit.size:
            p = p.copy()
            p[hit[0]] = 0.0
            p /= p.sum()
        return self._took(int(order[self.rng.choice(p.size, p=p)]))

    def _allowed(self, logits: np.ndarray) -> np.ndarray:
        x, best = self._adjusted(logits)
        if not np.isfinite(best):
            raise InputError("no token is allowed here (the grammar and the logit bias leave none)")
        return x

    def _took(self, tok: int) -> int:
        if self.window is not None:
            if len(self.window) == self.window.maxlen:
                old = self.window[0]
                self.counts[old] -= 1
                if not self.counts[old]:
                    del self.counts[old]
            self.window.append(tok)
        self.counts[tok] = self.counts.get(tok, 0) + 1
        if self.constraint is not None:
            self.constraint.accept(tok)
        return tok

    def choose(self, x: np.ndarray) -> int:
        if self.options.temperature == 0:
            return int(np.argmax(x))
        order, p = self.distribution(x)
        return int(order[self.rng.choice(p.size, p=p)])

    def distribution(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, probabilities) a sampling choice draws from: adjusted logits `x` after the
        temperature, top-k, top-p and min-p (temperature > 0)."""
        o = self.options
        order = np.argsort(-x, kind="stable")
        order = order[np.isfinite(x[order])]
        if 0 < o.top_k < order.size:
            order = order[:o.top_k]
        with np.errstate(over="ignore"):   # the best is 0, the rest <= 0: at any temperature, at worst -inf
            p = np.exp((x[order] - x[order[0]]) / o.temperature)
        p /= p.sum()
        if o.top_p < 1:
            keep = int(np.searchsorted(np.cumsum(p), o.top_p) + 1)
            order, p = order[:keep], p[:keep] / p[:keep].sum()
        if o.min_p > 0:
            keep = int(np.count_nonzero(p >= o.min_p * p[0]))
            order, p = order[:keep], p[:keep] / p[:keep].sum()
        return order, p


def verify_token(sampler: Callable[[np.ndarray], int], row: np.ndarray, draft: int) -> int:
    """The token chosen at a drafted position: the sampler's `verify` (the acceptance rule), or,
    for a plain callable, its own choice (exact for a deterministic one)."""
    verify = getattr(sampler, "verify", None)
    return int(verify(row, draft)) if verify is not None else int(sampler(row))


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
