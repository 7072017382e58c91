"""Speculative decoding with the file's own verifier: drafts (llm/drafting.py) checked in one call
of a multi-token method (a hybrid file's prefill graph), the longest prefix the sampler itself
would have chosen accepted, one more token chosen from the row after it.

A verification writes no cache entry it did not accept: the graph's new K/V entries wait in their
buffers, and `commit` copies those of the tokens the generation kept (the smart mask never opens a
slot past n_past, so a rejected position leaves the cache as if it had never been drafted).

Drafting pays when the tokens a verification yields outweigh what it costs over a plain decode
call: both costs are measured (seconds per forward, per method), and the yield is measured on the
verifications made, and while drafting is off, on the drafts it would have made (a draft is
checked against the tokens plain decoding then chose: no graph call). So plain chat, where drafts
rarely hold, runs plain decode calls; a text that quotes itself turns drafting on."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from qnnrt.errors import InputError
from qnnrt.llm.decode_stats import DecodeStats, ForwardGuesses
from qnnrt.llm.drafting import LookupOptions, PromptLookup, shared_prefix
from qnnrt.llm.errors import LayoutError
from qnnrt.llm.kv_cache import KVCache
from qnnrt.llm.layout import LlmLayout, MethodLayout
from qnnrt.llm.lookahead import Lookahead, LookaheadOptions
from qnnrt.llm.loops import Block, DecodeStrategy, Decoder, Steps, row_of
from qnnrt.llm.sampling import verify_token

SPECULATIVE_MODES = ("prompt-lookup", "lookahead")
DRAFT_POLICIES = ("auto", "always", "never")
OUTCOMES_KEPT = 8          # the recent verifications (or shadow drafts) the yield is judged on
COST_SMOOTHING = 0.25      # weight of a new forward's time in its method's running cost


@dataclass(frozen=True)
class SpeculativeOptions:
    """How to speculate. `max_draft` 0: as many tokens as the verifier's window holds beside the
    last one. `policy` auto: draft while it pays (measured); always: whenever a draft exists.
    `plain_via_verifier`: undrafted steps go through the verifier too, so every token comes from
    one graph (the reference where the prefill and decode graphs round differently)."""
    mode: str = "prompt-lookup"
    max_draft: int = 0
    policy: str = "auto"
    lookup: LookupOptions = field(default_factory=LookupOptions)
    plain_via_verifier: bool = False
    lookahead: LookaheadOptions = field(default_factory=LookaheadOptions)

    def __post_init__(self) -> None:
        if self.mode not in SPECULATIVE_MODES:
            raise InputError(f"speculative mode {self.mode!r}: expected one of {', '.join(SPECULATIVE_MODES)}")
        if self.policy not in DRAFT_POLICIES:
            raise InputError(f"draft policy {self.policy!r}: expected one of {', '.join(DRAFT_POLICIES)}")
        if self.max_draft < 0:
            raise InputError("max_draft must be >= 0 (0: the verifier's window)")


class CostMeter:
    """Seconds per forward of each method, a running average kept for the runner's life (what a
    call costs is the file's and the device's, not the text's)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, method: str, seconds: float) -> None:
        old = self.seconds.get(method)
        self.seconds[method] = seconds if old is None else old + COST_SMOOTHING * (seconds - old)


class DraftSwitch:
    """Whether to verify the draft at hand: the mean tokens the recent verifications yielded (or
    would have: `watch`; a draft still being judged counts with what it has held so far, so a
    long run of hits turns drafting on before it ends) times a plain forward's cost, against a
    verification's cost."""

    def __init__(self, meter: CostMeter, verifier: str, plain: str) -> None:
        self.meter, self.verifier, self.plain = meter, verifier, plain
        self.outcomes: deque[int] = deque(maxlen=OUTCOMES_KEPT)
        self._watched: tuple[int, list[int]] | None = None   # (where in the sequence, the draft)
        self._held_so_far = 0
        self.shadow_outcomes = 0

    def break_even(self) -> float | None:
        """Tokens a verification must yield to cost no more per token than plain forwards (None
        while a cost is unknown)."""
        verify, plain = self.meter.seconds.get(self.verifier), self.meter.seconds.get(self.plain)
        return None if verify is None or plain is None or plain <= 0 else verify / plain

    def pays(self) -> bool:
        judged = list(self.outcomes)
        if self._watched is not None and self._held_so_far > 0:
            judged.append(self._held_so_far + 1)     # the draft being judged holds so far: at least this
        if not judged:
            return False
        even = self.break_even()
        return even is None or sum(judged) / len(judged) > even

    def verified(self, tokens: int) -> None:
        """A verification yielded `tokens` (accepted drafts and the one after them)."""
        self.outcomes.append(tokens)

    def watch(self, at: int, draft: list[int]) -> None:
        """A draft not verified: judge it on the tokens plain decoding chooses from `at` on."""
        if self._watched is None:
            self._watched = (at, draft)
            self._held_so_far = 0

    def settle(self, seq: Sequence[int]) -> None:
        """Score the watched draft once the sequence tells how much of it would have held."""
        if self._watched is None:
            return
        at, draft = self._watched
        chosen = seq[at:at + len(draft)]
        held = shared_prefix(draft, chosen)
        self._held_so_far = held
        if held < len(chosen) or len(chosen) == len(draft):
            self.outcomes.append(held + 1)
            self.shadow_outcomes += 1
            self._watched = None


class SpeculativeDecoder:
    """One generation's forwards: a plain decode call, or the last token and a draft through the
    verifier."""

    def __init__(self, steps: Steps, layout: LlmLayout, sampler: Callable[[np.ndarray], int],
                 eos: frozenset[int], options: SpeculativeOptions, meter: CostMeter,
                 verifier: MethodLayout, clock: Callable[[], float]) -> None:
        self.steps, self.layout, self.sampler, self.eos = steps, layout, sampler, eos
        self.options, self.meter, self.verifier, self.clock = options, meter, verifier, clock
        self.plain = verifier if options.plain_via_verifier else layout.decode
        self.max_draft = min(options.max_draft or verifier.ar_len - 1, verifier.ar_len - 1)
        self.drafter = PromptLookup(options.lookup)
        self.switch = DraftSwitch(meter, verifier.name, self.plain.name)
        self.stats = DecodeStats(options.mode)
        self._last: MethodLayout = self.plain
        self._checked: ForwardGuesses | None = None   # what the last forward verified (None: plain)

    def _verifier_slots(self, cache: KVCache) -> int:
        """Tokens a verifier call at cache.n_past may keep (its cache holds C - T entries)."""
        return self.layout.cache_slots(self.verifier) - cache.n_past

    def _room_for_draft(self, cache: KVCache, room: int) -> int:
        """Draft tokens that fit: the tokens still wanted less one (the verifier adds one of its
        own), the window, and the verifier's cache slots."""
        return min(room - 1, self.max_draft, self._verifier_slots(cache) - 1)

    def forward(self, cache: KVCache, seq: Sequence[int], room: int) -> Block:
        self.switch.settle(seq)
        policy = self.options.policy
        draft = [] if policy == "never" else self.drafter.propose(seq, self._room_for_draft(cache, room))
        if draft and policy == "auto" and not self.switch.pays():
            self.switch.watch(len(seq), draft)
            draft = []
        return self._verify(cache, seq, draft) if draft else self._plain(cache, seq)

    def _run(self, method: MethodLayout, cache: KVCache, tokens: list[int]) -> np.ndarray:
        t0 = self.clock()
        raw = self.steps.forward(method, cache, tokens, 0)
        self.meter.add(method.name, self.clock() - t0)
        self._last = method
        return raw

    def _plain(self, cache: KVCache, seq: Sequence[int]) -> Block:
        # through the verifier while its cache slots last (plain_via_verifier), then the decode method
        method = self.plain if self._verifier_slots(cache) >= 1 else self.layout.decode
        raw = self._run(method, cache, [int(seq[-1])])
        row = row_of(self.layout, raw[0, 0])
        self._checked = None
        return Block([self.sampler(row)], [row])

    def _verify(self, cache: KVCache, seq: Sequence[int], draft: list[int]) -> Block:
        raw = self._run(self.verifier, cache, [int(seq[-1]), *draft])
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        accepted = 0
        for i in range(len(draft) + 1):
            row = row_of(self.layout, raw[0, i])
            if i == len(draft):
                tok = self.sampler(row)            # every draft held: one token more
            else:
                tok = verify_token(self.sampler, row, draft[i])
                accepted += tok == draft[i]
            tokens.append(tok)
            rows.append(row)
            if i == len(draft) or tok != draft[i] or tok in self.eos:
                break
        self._checked = ForwardGuesses(len(draft), accepted)
        self.switch.verified(len(tokens))
        return Block(tokens, rows, self._checked)

    def commit(self, cache: KVCache, n: int) -> None:
        self.steps.commit(self._last, cache, n)
        self.stats.kept(n, self._checked)

    def report(self) -> dict[str, Any]:
        return self.stats.report(policy=self.options.policy) | {
            "shadow_drafts_judged": self.switch.shadow_outcomes,
            "forward_ms": {m: round(s * 1e3, 4) for m, s in sorted(self.meter.seconds.items())}}


def verifier_of(layout: LlmLayout) -> MethodLayout:
    """The cheapest method that takes several tokens at once: a lookahead file's decode window,
    else a hybrid file's prefill window."""
    multi = [m for m in (layout.decode, layout.prefill) if m.ar_len > 1]
    if not multi:
        raise LayoutError(f"speculative decoding needs a method that takes several tokens at once to verify "
                          f"drafts (a hybrid file's prefill_forward); this file is {layout.mode}-only: its "
                          f"{layout.decode.name} takes one token per call")
    return min(multi, key=lambda m: m.ar_len)


def strategy_for(layout: LlmLayout, options: SpeculativeOptions) -> DecodeStrategy:
    """The decode strategy `options` asks of this file."""
    if options.mode == "lookahead":
        return Lookahead(layout, options.lookahead)
    return Speculation(layout, options)


class Speculation:
    """The prompt-lookup strategy of a runner: its options, the verifier method of the file, and
    the costs measured across its generations."""

    def __init__(self, layout: LlmLayout, options: SpeculativeOptions) -> None:
        self.layout, self.options = layout, options
        self.verifier = verifier_of(layout)
        if options.max_draft > self.verifier.ar_len - 1:
            raise InputError(f"a draft of {options.max_draft} tokens does not fit: {self.verifier.name} verifies "
                             f"{self.verifier.ar_len - 1} beside the last token")
        self.meter = CostMeter()

    def decoder(self, steps: Steps, layout: LlmLayout, sampler: Callable[[np.ndarray], int],
                eos: frozenset[int], prefill_s_per_call: float, clock: Callable[[], float]) -> Decoder:
        if layout.prefill.name not in self.meter.seconds and prefill_s_per_call > 0:
            self.meter.add(layout.prefill.name, prefill_s_per_call)
        return SpeculativeDecoder(steps, layout, sampler, eos, self.options, self.meter, self.verifier, clock)
