"""The generate and score loops over `Steps`: the prepared calls (llm/prepared.py) or any
``run(method, inputs) -> outputs`` callable (`GenericSteps`, through ``Program.run``)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from qnnrt.errors import InputError

from qnnrt.llm.decode_stats import ForwardGuesses
from qnnrt.llm.errors import ContextLengthError
from qnnrt.llm.kv_cache import KVCache, WindowTree, build_step_inputs, split_outputs
from qnnrt.llm.layout import LlmLayout, MethodLayout
from qnnrt.llm.sampling import Sampler, log_softmax
from qnnrt.runtime.hooks import Tracing

RunFn = Callable[[str, Mapping[str, np.ndarray]], Any]


@runtime_checkable
class Steps(Protocol):
    """How the loops call a method: `forward` runs it, `commit` keeps the new cache entries of its
    first n tokens (a verification keeps only the tokens it accepted)."""

    def forward(self, method: MethodLayout, cache: KVCache, tokens: Sequence[int],
                pad_token: int, tree: WindowTree | None = None) -> np.ndarray:
        """Run `method` on up to T tokens at cache.n_past (a causal chain, or laid out by `tree`);
        return the raw logits [1, T, V] (valid until the next call). The cache is unchanged until
        `commit`."""
        ...

    def commit(self, method: MethodLayout, cache: KVCache, n: int, slots: Sequence[int] | None = None) -> None:
        """Write the new entries of the last forward's first n tokens (or of its window
        `slots`[:n], in that order) into the cache."""
        ...


def call(steps: Steps, method: MethodLayout, cache: KVCache, tokens: Sequence[int],
         pad_token: int) -> np.ndarray:
    """`forward`, then keep every token's entries."""
    logits = steps.forward(method, cache, tokens, pad_token)
    steps.commit(method, cache, len(tokens))
    return logits


class GenericSteps:
    """Calls through a ``run(method, inputs) -> outputs`` callable: the inputs built per call, the
    outputs split; `commit` writes them into the cache."""

    def __init__(self, run: RunFn, layout: LlmLayout) -> None:
        self.run, self.layout = run, layout
        self._new: tuple[list, list] = ([], [])

    def forward(self, method: MethodLayout, cache: KVCache, tokens: Sequence[int],
                pad_token: int, tree: WindowTree | None = None) -> np.ndarray:
        inputs = build_step_inputs(self.layout, method, cache, tokens, pad_token, tree)
        logits, ko, vo = split_outputs(self.layout, method, self.run(method.name, inputs))
        self._new = (ko, vo)
        return logits

    def commit(self, method: MethodLayout, cache: KVCache, n: int, slots: Sequence[int] | None = None) -> None:
        cache.update(method, *self._new, n, slots)


def as_steps(run: RunFn | Steps, layout: LlmLayout) -> Steps:
    return run if isinstance(run, Steps) else GenericSteps(run, layout)


def row_of(layout: LlmLayout, row: np.ndarray) -> np.ndarray:
    """One logits row as float32, a fresh array (the raw row may be a buffer the next call
    overwrites)."""
    if layout.logits_quant is not None:
        return layout.logits_quant.dequantize(row)
    return np.array(row, dtype=np.float32, copy=True)


def prefill(run: RunFn | Steps, layout: LlmLayout, cache: KVCache, prompt: Sequence[int], *,
            pad_token: int = 0, all_logits: list | None = None,
            tracer: Tracing | None = None) -> np.ndarray:
    """Process ``prompt`` from cache.n_past in windows of T; return the float logits for the next
    token. `tracer`: each window a slice of the run's trace."""
    steps = as_steps(run, layout)
    m = layout.prefill
    prompt = [int(t) for t in prompt]
    if not prompt:
        raise InputError("empty prompt")
    if cache.n_past + len(prompt) > layout.prompt_capacity:
        raise ContextLengthError(
            f"prompt of {len(prompt)} tokens at position {cache.n_past} exceeds what the prompt processor "
            f"({m.name}, window {m.ar_len}) can hold: {layout.prompt_capacity} tokens (context {layout.context_len} "
            f"- window {m.ar_len})")
    last = None
    for j in range(0, len(prompt), m.ar_len):
        chunk = prompt[j:j + m.ar_len]
        if tracer is None:
            raw = call(steps, m, cache, chunk, pad_token)
        else:
            with tracer.scope("prefill chunk", "llm", {"method": m.name, "tokens": len(chunk),
                                                       "n_past": cache.n_past}):
                raw = call(steps, m, cache, chunk, pad_token)
        if all_logits is not None:
            all_logits.extend(row_of(layout, r) for r in raw[0, :len(chunk)])
            last = all_logits[-1]
        else:
            last = row_of(layout, raw[0, len(chunk) - 1])
    assert last is not None
    return last


def decode_step(run: RunFn | Steps, layout: LlmLayout, cache: KVCache, token: int) -> np.ndarray:
    return row_of(layout, call(as_steps(run, layout), layout.decode, cache, [int(token)], 0)[0, 0])


def _pct(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if len(xs) else float("nan")


@dataclass
class Block:
    """What one decode forward chose: the tokens in order, the float logits row each was chosen
    from, and what it checked (guessed tokens offered and held; None: a plain forward)."""
    tokens: list[int]
    rows: list[np.ndarray]
    guesses: ForwardGuesses | None = None


class Decoder(Protocol):
    """One generation's decode forwards: `forward` runs the graph(s) for the sequence's last token
    (and whatever it guesses after it) and chooses at most `room` tokens; `commit(n)` keeps the
    cache entries of the first n of them (the generation may stop inside a block)."""

    def forward(self, cache: KVCache, seq: Sequence[int], room: int) -> Block:
        ...

    def commit(self, cache: KVCache, n: int) -> None:
        ...

    def report(self) -> dict[str, Any] | None:
        """What this decoder did, for the result (None: nothing beyond the plain figures)."""
        ...


class DecodeStrategy(Protocol):
    """Makes a generation's decoder: plain (one token per decode call) or speculative."""

    def decoder(self, steps: Steps, layout: LlmLayout, sampler: Callable[[np.ndarray], int],
                eos: frozenset[int], prefill_s_per_call: float, clock: Callable[[], float]) -> Decoder:
        """`prefill_s_per_call`: what a prompt window cost (on `clock`, the loop's)."""
        ...


class CycleCounter(Protocol):
    """What QNN's profile has counted so far (profiling.ExecutionProfiler at the detailed level)."""

    def accel_cycles(self) -> float:
        ...

    def executions(self) -> dict[str, int]:
        ...


class PlainDecoder:
    """One token per call of the decode method."""

    def __init__(self, steps: Steps, layout: LlmLayout, sampler: Callable[[np.ndarray], int]) -> None:
        self.steps, self.layout, self.sampler = steps, layout, sampler

    def forward(self, cache: KVCache, seq: Sequence[int], room: int) -> Block:
        raw = self.steps.forward(self.layout.decode, cache, [int(seq[-1])], 0)
        row = row_of(self.layout, raw[0, 0])
        return Block([self.sampler(row)], [row])

    def commit(self, cache: KVCache, n: int) -> None:
        self.steps.commit(self.layout.decode, cache, n)

    def report(self) -> None:
        return None


class Plain:
    """The plain strategy."""

    def decoder(self, steps: Steps, layout: LlmLayout, sampler: Callable[[np.ndarray], int],
                eos: frozenset[int], prefill_s_per_call: float, clock: Callable[[], float]) -> Decoder:
        return PlainDecoder(steps, layout, sampler)


PLAIN = Plain()


@dataclass
class GenerationResult:
    prompt_tokens: list[int]
    tokens: list[int]                  # generated ids (an EOS that stopped generation included)
    stop_reason: str                   # "eos" | "max_new_tokens" | "context" | "stopped" (on_token said so)
    prefill_s: float                   # prefill calls + first sampling (= time to first token)
    prefill_calls: int
    decode_s: list[float]              # per decoded token (a forward's time shared by its tokens), seconds
    logits: list[np.ndarray] = field(default_factory=list, repr=False)   # per generated token (if kept)
    decode_forwards: int = 0           # graph calls of the decode phase (plain steps and verifications)
    speculative: dict[str, Any] | None = None   # the speculative decoder's figures
    decode_cycles: float | None = None  # accelerator cycles of the decode phase (QNN's profile)
    decode_executions: dict[str, int] | None = None   # graph -> its executions in the decode phase

    @property
    def ttft_s(self) -> float:
        return self.prefill_s

    def report(self) -> dict:
        d = [x * 1e3 for x in self.decode_s]
        r = {"prompt_tokens": len(self.prompt_tokens), "generated_tokens": list(self.tokens),
             "n_generated": len(self.tokens), "stop_reason": self.stop_reason, "ttft_s": self.prefill_s,
             "prefill_calls": self.prefill_calls,
             "prefill_tokens_per_s": len(self.prompt_tokens) / self.prefill_s if self.prefill_s > 0 else None,
             "decode_tokens_per_s": len(d) / (sum(d) / 1e3) if d and sum(d) > 0 else None,
             "decode_ms": {"min": min(d) if d else None, "median": float(np.median(d)) if d else None,
                           "p90": _pct(d, 90) if d else None, "n": len(d)},
             "decode_forwards": self.decode_forwards}
        if self.decode_cycles is not None:
            r["decode_accel_cycles"] = self.decode_cycles
            r["accel_cycles_per_decoded_token"] = self.decode_cycles / len(d) if d else None
        if self.decode_executions is not None:
            r["decode_executions"] = dict(self.decode_executions)
        if self.speculative is not None:
            r["speculative"] = self.speculative
        return r


def generate(run: RunFn | Steps, layout: LlmLayout, prompt: Sequence[int], max_new_tokens: int, *,
             sampler: Callable[[np.ndarray], int] | None = None, eos_ids: Sequence[int] | None = None,
             seq_len: int | None = None, pad_token: int = 0, cache: KVCache | None = None,
             on_token: Callable[[int], bool | None] | None = None, keep_logits: bool = False,
             clock: Callable[[], float] = time.perf_counter, strategy: DecodeStrategy = PLAIN,
             context: Sequence[int] = (), cycles: CycleCounter | None = None,
             tracer: Tracing | None = None) -> GenerationResult:
    """Prefill ``prompt`` then decode until EOS, ``max_new_tokens`` or the sequence limit.

    seq_len (default: context length, clamped to it) bounds positions: at most seq_len - len(prompt)
    tokens are generated (ExecuTorch's token generator stops at pos == seq_len - 1).
    eos_ids default to the layout's (get_eos_id); pass [] to never stop on EOS.
    on_token(token) returning True stops generation after that token (a stop string, a client gone).
    `strategy` makes the decoder (plain, or speculative: llm/speculative.py); `context` are the
    tokens the cache already holds (what a draft may quote besides the prompt); `cycles` reads
    what QNN's profile counted (the decode phase's cycles and graph executions are reported);
    `tracer` times the generation in the run's trace (prefill chunks, each decode forward or
    verification with what it drafted and accepted, each sampling: llm/tracing.py).
    """
    steps = as_steps(run, layout)
    sampler = sampler or Sampler()
    if tracer is not None:
        from qnnrt.llm.tracing import TracedSampler
        sampler = TracedSampler(sampler, tracer)
        with tracer.scope("generate", "llm", {"prompt_tokens": len(prompt),
                                              "max_new_tokens": max_new_tokens}) as scope:
            result = _generate(steps, layout, prompt, max_new_tokens, sampler, eos_ids, seq_len,
                               pad_token, cache, on_token, keep_logits, clock, strategy, context,
                               cycles, tracer)
            scope.note(generated=len(result.tokens), stop_reason=result.stop_reason)
        return result
    return _generate(steps, layout, prompt, max_new_tokens, sampler, eos_ids, seq_len, pad_token,
                     cache, on_token, keep_logits, clock, strategy, context, cycles, None)


def _generate(steps: Steps, layout: LlmLayout, prompt: Sequence[int], max_new_tokens: int,
              sampler: Callable[[np.ndarray], int], eos_ids: Sequence[int] | None, seq_len: int | None,
              pad_token: int, cache: KVCache | None, on_token: Callable[[int], bool | None] | None,
              keep_logits: bool, clock: Callable[[], float], strategy: DecodeStrategy,
              context: Sequence[int], cycles: CycleCounter | None,
              tracer: Tracing | None) -> GenerationResult:
    eos = frozenset(layout.eos_ids if eos_ids is None else eos_ids)
    C = layout.decode_limit
    seq_len = C if seq_len is None or seq_len <= 0 else min(int(seq_len), C)
    cache = cache or KVCache(layout)
    prompt = [int(t) for t in prompt]
    if cache.n_past + len(prompt) >= seq_len:
        raise ContextLengthError(f"prompt of {len(prompt)} tokens at position {cache.n_past} leaves no room to "
                                 f"generate within the sequence length {seq_len}")
    if max_new_tokens < 1:
        raise InputError("max_new_tokens must be >= 1")
    t0 = clock()
    n0 = cache.n_past
    kept: list[np.ndarray] = []
    logits = prefill(steps, layout, cache, prompt, pad_token=pad_token, tracer=tracer)
    prefill_calls = -(-len(prompt) // layout.prefill.ar_len)
    tok = sampler(logits)
    t1 = clock()
    c1 = (cycles.accel_cycles(), cycles.executions()) if cycles is not None else None
    if keep_logits:
        kept.append(logits)
    out = [tok]
    seq = [*map(int, context), *prompt, tok]
    decoder = strategy.decoder(steps, layout, sampler, eos, (t1 - t0) / prefill_calls, clock)
    stopped = bool(on_token and on_token(tok))
    decode_s: list[float] = []
    forwards = 0
    pos = n0 + len(prompt)                  # position of `tok`
    reason = "max_new_tokens"
    while True:
        if stopped:
            reason = "stopped"
            break
        if tok in eos:
            reason = "eos"
            break
        if len(out) >= max_new_tokens:
            break
        if pos >= seq_len - 1:
            reason = "context"
            break
        ta = clock()
        began = tracer.now() if tracer is not None else 0
        block = decoder.forward(cache, seq, min(max_new_tokens - len(out), seq_len - 1 - pos))
        forwards += 1
        used = 0
        for tok, row in zip(block.tokens, block.rows):
            used += 1
            out.append(tok)
            seq.append(tok)
            pos += 1
            if keep_logits:
                kept.append(row)
            stopped = bool(on_token and on_token(tok))
            if stopped or tok in eos:
                break
        decoder.commit(cache, used)
        decode_s.extend([(clock() - ta) / used] * used)
        if tracer is not None:
            _trace_forward(tracer, began, block.guesses, used)
    result = GenerationResult(prompt, out, reason, t1 - t0, prefill_calls, decode_s, kept, forwards,
                              decoder.report())
    if cycles is not None and c1 is not None:
        ran = cycles.executions()
        result.decode_cycles = cycles.accel_cycles() - c1[0]
        result.decode_executions = {g: n - c1[1].get(g, 0) for g, n in ran.items() if n > c1[1].get(g, 0)}
    return result


def _trace_forward(tracer: Tracing, began: int, guesses: ForwardGuesses | None, kept: int) -> None:
    """A decode forward's slice: a plain one, or a verification with the guesses it checked and
    how many of them the generation kept (as the report's `speculative` section counts them)."""
    if guesses is None:
        tracer.span("decode", "llm", began, {"tokens": kept})
    else:
        tracer.span("verify", "llm", began, {"tokens": kept, "drafted": guesses.drafted,
                                             "accepted": min(guesses.accepted, kept)})


@dataclass
class ScoreResult:
    tokens: list[int]
    logprobs: list[float]              # log p(tokens[i+1] | tokens[:i+1]), i = 0..N-2
    logits: list[np.ndarray] = field(repr=False, default_factory=list)  # row predicting tokens[i+1]
    prefill_tokens: int = 0

    @property
    def nll(self) -> float:
        return -float(np.mean(self.logprobs)) if self.logprobs else float("nan")

    @property
    def perplexity(self) -> float:
        return float(np.exp(self.nll))


def score(run: RunFn | Steps, layout: LlmLayout, tokens: Sequence[int], *, n_prefill: int | None = None,
          pad_token: int = 0, cache: KVCache | None = None, tracer: Tracing | None = None) -> ScoreResult:
    """Teacher-forced pass: the first n_prefill tokens (default: as many of tokens[:-1] as the prompt
    processor holds) through prefill, the rest one at a time through decode."""
    toks = [int(t) for t in tokens]
    if len(toks) < 2:
        raise InputError("scoring needs at least 2 tokens")
    cache = cache or KVCache(layout)
    if cache.n_past + len(toks) > layout.decode_limit:
        raise ContextLengthError(f"{len(toks)} tokens at position {cache.n_past} exceed the {layout.decode_limit} "
                                 f"a score can reach (context {layout.context_len}, decode window "
                                 f"{layout.decode.ar_len})")
    if n_prefill is None:
        n_prefill = min(len(toks) - 1, layout.prompt_capacity - cache.n_past)
    if not 1 <= n_prefill <= len(toks) - 1:
        raise InputError(f"n_prefill {n_prefill} outside [1, {len(toks) - 1}]")
    steps = as_steps(run, layout)
    rows: list[np.ndarray] = []
    prefill(steps, layout, cache, toks[:n_prefill], pad_token=pad_token, all_logits=rows, tracer=tracer)
    for t in toks[n_prefill:-1]:       # within the decode method's slots: checked above
        rows.append(decode_step(steps, layout, cache, t))
    lp = [float(log_softmax(r)[t]) for r, t in zip(rows, toks[1:])]
    return ScoreResult(toks, lp, rows, n_prefill)
