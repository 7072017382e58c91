"""Lookahead decoding for files ExecuTorch's llama scripts export with ``--model_mode lookahead``:
the decode method takes T slots at once, and its runner fills them with the current token, a
window of (N-1) levels x W columns of guesses that improve each step (Jacobi iterations over the
next positions), and up to G n-grams from a pool the window feeds, each checked against what the
model itself chooses. Written from the behaviour of ExecuTorch's runner (its public source), so a
file behaves as there: the same slot layout, positions, masks, window and pool updates, and the
same order of checking guesses; greedy output equals plain decoding's, and a sampled token is
drawn from the row whose context it continues, so sampling is unchanged too.

The file records T but not N, W and G (ExecuTorch's runner takes them on its command line):
`LookaheadOptions.for_window` picks what fills T, and the user may give others that fit."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from qnnrt.errors import InputError
from qnnrt.llm.decode_stats import DecodeStats, ForwardGuesses
from qnnrt.llm.kv_cache import KVCache, WindowTree
from qnnrt.llm.layout import LlmLayout, MethodLayout
from qnnrt.llm.loops import Block, Decoder, Steps, row_of


@dataclass(frozen=True)
class LookaheadOptions:
    """N (n-gram size, levels + 1), W (window columns), G (n-grams verified per step); None: N = 3
    and W = G filling the file's window, as ExecuTorch's export sizes it."""
    ngram: int | None = None
    window: int | None = None
    gcap: int | None = None

    def for_window(self, T: int) -> LookaheadParams:
        """The parameters for a decode method of T slots (InputError when they do not fit)."""
        n = 3 if self.ngram is None else self.ngram
        if n < 2:
            raise InputError(f"lookahead ngram {n}: at least 2")
        half = max(1, T // (2 * (n - 1)))
        o = LookaheadParams(n, half if self.window is None else self.window, half if self.gcap is None else self.gcap)
        if o.window < 1 or o.gcap < 0:
            raise InputError(f"lookahead window {o.window} / gcap {o.gcap}: window >= 1 and gcap >= 0")
        if o.slots > T:
            raise InputError(f"lookahead ngram {o.ngram}, window {o.window}, gcap {o.gcap} needs "
                             f"(window + gcap) x (ngram - 1) = {o.slots} slots; the file's decode method has {T}")
        return o


@dataclass(frozen=True)
class LookaheadParams:
    """N, W and G as a run uses them."""
    ngram: int
    window: int
    gcap: int

    @property
    def slots(self) -> int:
        return (self.window + self.gcap) * (self.ngram - 1)


class CRand:
    """The C library's rand() as glibc computes it for seed 1 (what an unseeded process draws),
    for the window's first guesses: with it a step trace matches ExecuTorch's runner step for
    step. Any draw would do for correctness."""

    def __init__(self, seed: int = 1) -> None:
        r = [seed]
        for i in range(1, 31):
            r.append((16807 * r[i - 1]) % 2147483647)
        r += [r[i - 31] for i in range(31, 34)]
        for i in range(34, 344):
            r.append((r[i - 31] + r[i - 3]) & 0xFFFFFFFF)
        self._r = r[-34:]

    def __call__(self) -> int:
        r = self._r
        x = (r[-31] + r[-3]) & 0xFFFFFFFF
        r.append(x)
        del r[0]
        return x >> 1


class NgramPool:
    """Up to G continuations (N-1 tokens each) per first token, the oldest replaced first, a
    continuation already held not added twice."""

    def __init__(self, gcap: int) -> None:
        self.gcap = gcap
        self._entries: dict[int, list[tuple[int, ...]]] = {}
        self._head: dict[int, int] = {}

    def add(self, key: int, value: tuple[int, ...]) -> None:
        if self.gcap < 1:
            return
        held = self._entries.setdefault(key, [])
        if value in held:
            return
        head = self._head.get(key, 0)
        if len(held) < self.gcap:
            held.append(value)
        else:
            held[head] = value
        self._head[key] = (head + 1) % self.gcap

    def guesses(self, key: int) -> list[tuple[int, ...]]:
        return list(self._entries.get(key, ()))


@dataclass
class LookaheadState:
    """What lives for the runner's life, as in ExecuTorch's runner: the window (made from the
    first prompt) and the pool."""
    options: LookaheadParams
    pool: NgramPool
    window: list[list[int]] = field(default_factory=list)     # [N-1][W]
    rand: CRand = field(default_factory=CRand)

    def start(self, seq: Sequence[int]) -> None:
        """The first guesses: tokens of the sequence (less its first) drawn at random."""
        if self.window:
            return
        pick = list(seq[1:]) or list(seq)
        o = self.options
        self.window = [[pick[self.rand() % len(pick)] for _ in range(o.window)] for _ in range(o.ngram - 1)]


class StepLayout:
    """Where everything sits in the T slots: slot 0 the current token; level i column j at
    W*i + j (level 0 column 0 is slot 0); guess g's k-th token at W*(N-1) + g*(N-1) + k. Each slot
    sees its parent chain: level 0 the columns left of it, a deeper level its column above it, a
    guess slot 0 and its own earlier tokens. Spare slots see only themselves."""

    def __init__(self, o: LookaheadParams, T: int) -> None:
        N, W = o.ngram, o.window
        parents, offsets = [-1] * T, [0] * T
        for i in range(N - 1):
            for j in range(W):
                s = W * i + j
                parents[s] = (j - 1 if j else -1) if i == 0 else W * (i - 1) + j
                offsets[s] = i + j
        self.guess_base = W * (N - 1)
        for g in range(o.gcap):
            for k in range(N - 1):
                s = self.guess_base + g * (N - 1) + k
                parents[s] = 0 if k == 0 else s - 1
                offsets[s] = 1 + k
        self.tree = WindowTree.from_parents(parents, offsets)
        self.last_level = W * (N - 2)          # first slot of the deepest level


class LookaheadDecoder:
    """One generation's lookahead steps over the file's decode method."""

    def __init__(self, steps: Steps, layout: LlmLayout, sampler: Callable[[np.ndarray], int],
                 eos: frozenset[int], state: LookaheadState, step_layout: StepLayout) -> None:
        self.steps, self.layout, self.sampler, self.eos = steps, layout, sampler, eos
        self.state, self.at = state, step_layout
        self.method: MethodLayout = layout.decode
        self.stats = DecodeStats("lookahead")
        self._selected: list[int] = []
        self._checked = ForwardGuesses()    # what the last step verified

    def _inputs(self, cur: int) -> tuple[list[int], list[tuple[int, ...]]]:
        o, st = self.state.options, self.state
        T = self.method.ar_len
        tokens = [0] * T
        for i in range(o.ngram - 1):
            for j in range(o.window):
                tokens[o.window * i + j] = st.window[i][j]
        tokens[0] = cur
        guesses = st.pool.guesses(cur)[:o.gcap]
        for g, guess in enumerate(guesses):
            base = self.at.guess_base + g * (o.ngram - 1)
            tokens[base:base + len(guess)] = guess
        return tokens, guesses

    def forward(self, cache: KVCache, seq: Sequence[int], room: int) -> Block:
        o = self.state.options
        self.state.start(seq)
        tokens, guesses = self._inputs(int(seq[-1]))
        raw = self.steps.forward(self.method, cache, tokens, 0, self.at.tree)
        # no more than the tokens wanted, nor than the cache slots left to keep their entries
        room = min(room, self.layout.cache_slots(self.method) - cache.n_past)
        out: list[int] = []
        rows: list[np.ndarray] = []
        self._selected = []
        active = list(range(len(guesses)))
        slot = 0
        for v in range(o.ngram):
            row = row_of(self.layout, raw[0, slot])
            tok = self.sampler(row)
            out.append(tok)
            rows.append(row)
            self._selected.append(slot)
            if v == 0:
                self._advance_window(raw)
            active = [g for g in active if v < o.ngram - 1 and guesses[g][v] == tok]
            if not active or tok in self.eos or len(out) >= room:
                break
            slot = self.at.guess_base + active[0] * (o.ngram - 1) + v
        # the guesses that held are the inputs of the chosen slots after slot 0
        self._checked = ForwardGuesses(len(guesses) * (o.ngram - 1), len(self._selected) - 1)
        return Block(out, rows, self._checked)

    def _advance_window(self, raw: np.ndarray) -> None:
        """Levels move up one; the deepest level becomes what the model chose after it; each
        column's n-gram (old level-0 token, then the column's new levels) goes to the pool."""
        o, st = self.state.options, self.state
        first = list(st.window[0])
        chosen = [int(np.argmax(row_of(self.layout, raw[0, self.at.last_level + j]))) for j in range(o.window)]
        st.window = st.window[1:] + [chosen]
        for j in range(o.window):
            st.pool.add(first[j], tuple(level[j] for level in st.window))

    def commit(self, cache: KVCache, n: int) -> None:
        self.steps.commit(self.method, cache, n, self._selected)
        self.stats.kept(n, self._checked)

    def report(self) -> dict[str, Any]:
        o = self.state.options
        return self.stats.report(policy="always", ngram=o.ngram, window=o.window, gcap=o.gcap)


class Lookahead:
    """The lookahead strategy of a runner over a lookahead file."""

    def __init__(self, layout: LlmLayout, options: LookaheadOptions) -> None:
        if layout.mode != "lookahead":
            raise InputError(f"lookahead decoding needs a file exported with --model_mode lookahead (a decode "
                             f"method of several slots); this one is {layout.mode} with a decode window of "
                             f"{layout.decode.ar_len}: use --speculative prompt-lookup")
        T = layout.decode.ar_len
        self.options = options.for_window(T)
        self.state = LookaheadState(self.options, NgramPool(self.options.gcap))
        self.step_layout = StepLayout(self.options, T)

    def decoder(self, steps: Steps, layout: LlmLayout, sampler: Callable[[np.ndarray], int],
                eos: frozenset[int], prefill_s_per_call: float, clock: Callable[[], float]) -> Decoder:
        return LookaheadDecoder(steps, layout, sampler, eos, self.state, self.step_layout)
