"""Speculative decoding (llm/drafting.py, llm/speculative.py): the n-gram drafter, the acceptance
rule against its formula, and the decode loop against plain decoding on a numpy model whose next
token depends on every cache entry it can see (a wrong or left-over entry changes the output), so
identical tokens and identical caches mean the verification kept exactly what plain decoding
would have written. The real graphs: tests/llm/test_speculative_fixture.py."""
from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

import numpy as np
import pytest

from qnnrt.errors import InputError
from qnnrt.llm import KVCache, LlmLayout
from qnnrt.llm.drafting import LookupOptions, PromptLookup
from qnnrt.llm.errors import LayoutError
from qnnrt.llm.loops import PLAIN, generate
from qnnrt.llm.sampling import Sampler, SamplingOptions
from qnnrt.llm.speculative import Speculation, SpeculativeOptions


# -- the drafter ----------------------------------------------------------------------------------
def test_lookup_prefers_the_longest_and_most_recent_match():
    d = PromptLookup(LookupOptions(ngram_max=3))
    seq = [1, 2, 3, 7, 9, 2, 3, 8, 5, 1, 2, 3]
    # (1,2,3) was followed by 7; (2,3) last by 8: the 3-gram wins
    assert d.propose(seq, 2) == [7, 9]
    assert PromptLookup(LookupOptions(ngram_max=2)).propose(seq, 2) == [8, 5]
    assert d.propose([4, 5, 6], 3) == []
    assert d.propose(seq, 0) == []


def test_lookup_continues_a_loop_past_the_end_of_the_sequence():
    d = PromptLookup()
    assert d.propose([5, 1, 2, 3, 1, 2, 3, 1, 2], 7) == [3, 1, 2, 3, 1, 2, 3]
    assert d.propose([4, 4, 4], 3) == [4, 4, 4]


def test_lookup_index_grows_with_the_sequence_and_starts_again_when_cut():
    d = PromptLookup()
    seq = [1, 2, 3]
    assert d.propose(seq, 2) == []
    seq += [9, 1, 2]
    assert d.propose(seq, 2) == [3, 9]
    assert d.propose([7, 8], 2) == []          # shorter: a new sequence, the old index is gone
    with pytest.raises(InputError):
        LookupOptions(ngram_max=1, ngram_min=2)


# -- the acceptance rule ----------------------------------------------------------------------------
class _Rng:
    """Returns the given uniform draw and records what a choice was asked to draw from."""

    def __init__(self, u: float) -> None:
        self.u = u
        self.p: Any = None

    def random(self) -> float:
        return self.u

    def choice(self, n: int, p: np.ndarray) -> int:
        self.p = np.asarray(p)
        return int(np.argmax(p))


LOGITS = np.log(np.array([0.1, 0.2, 0.3, 0.4]))


@pytest.mark.parametrize("draft", [0, 1, 3])
def test_verify_accepts_with_probability_p_of_the_draft_else_draws_from_p_without_it(draft):
    p = np.exp(LOGITS) / np.exp(LOGITS).sum()
    for u, accepted in ((p[draft] - 1e-9, True), (p[draft] + 1e-9, False)):
        s = Sampler(SamplingOptions(temperature=1.0))
        s.rng = _Rng(u)  # type: ignore[assignment]
        tok = s.verify(LOGITS, draft)
        if accepted:
            assert tok == draft and s.rng.p is None
        else:
            order, _ = s.distribution(LOGITS.astype(np.float64))
            residual = np.where(np.arange(4) == draft, 0.0, p)
            assert np.allclose(s.rng.p, residual[order] / residual.sum())
            assert tok != draft
        assert s.counts == {tok: 1}


def test_verified_tokens_follow_the_sampler_distribution():
    """Drafting a fixed token never changes what comes out: the empirical distribution of the
    verified token equals the sampler's own (top-k 3 at temperature 0.8 here)."""
    opts = SamplingOptions(temperature=0.8, top_k=3, seed=11)
    s = Sampler(opts)
    order, p = s.distribution(LOGITS / 1.0)
    want = dict(zip(order.tolist(), p.tolist()))
    n = 40000
    counts: Counter = Counter()
    s = Sampler(opts)
    for _ in range(n):
        counts[s.verify(LOGITS, 1)] += 1
    assert set(counts) <= set(want)
    tv = 0.5 * sum(abs(counts.get(t, 0) / n - q) for t, q in want.items())
    assert tv < 0.01, (counts, want)


def test_greedy_verify_accepts_iff_the_draft_is_the_argmax():
    s = Sampler()
    assert s.verify(LOGITS, 3) == 3
    assert s.verify(LOGITS, 2) == 3


# -- the decode loop on a numpy model ----------------------------------------------------------------
T, C, V = 4, 24, 6


def _layout(T: int = T) -> LlmLayout:
    def method(t: int) -> dict:
        return {"inputs": [("tokens", (1, t), "int32"), ("atten_mask", (1, 1, t, C), "float32"),
                           ("input_pos", (1, t), "int32"), ("k0", (1, 1, 2, C - t), "float32"),
                           ("v0", (1, 1, C - t, 2), "float32")],
                "outputs": [("logits", (1, t, V), "float32"), ("ko0", (1, 1, 2, t), "float32"),
                            ("vo0", (1, 1, t, 2), "float32")]}
    methods = {"kv_forward": method(1)} | ({"prefill_forward": method(T)} if T > 1 else {})
    return LlmLayout.from_program({"get_n_layers": 1, "get_max_context_len": C, "get_eos_id": 5}, methods)


class ToyModel:
    """Reads the tokens it can see from its K cache input (slots the mask opens) and the window;
    the next token is a fixed function of the last two; each call's cost advances `clock` (a
    verification costs `verify_cost` plain calls)."""

    def __init__(self, table: np.ndarray, verify_cost: float = 2.0) -> None:
        self.table, self.verify_cost, self.now = table, verify_cost, 0.0
        self.calls: Counter = Counter()

    def clock(self) -> float:
        return self.now

    def __call__(self, name: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        toks, mask, pos, k = inputs["tokens"][0], inputs["atten_mask"], inputs["input_pos"][0], inputs["k0"]
        t = toks.size
        self.calls[name] += 1
        self.now += self.verify_cost if t > 1 else 1.0
        n_past = int(np.count_nonzero(mask[0, 0, 0, :C - t] == 0.0))
        seen = k[0, 0, 0, :n_past].astype(int).tolist()
        logits = np.zeros((1, t, V), np.float32)
        for i in range(t):
            hist = seen + toks[:i + 1].tolist()
            prev = hist[-2] if len(hist) > 1 else 0
            logits[0, i] = np.where(np.arange(V) == self.table[prev, hist[-1]], 4.0, 0.0) + 0.01 * np.arange(V)
        ko = np.stack([toks, pos]).astype(np.float32)[None, None]               # [1,1,2,t]
        vo = np.stack([pos, toks], axis=-1).astype(np.float32)[None, None]     # [1,1,t,2]
        return {"logits": logits, "ko0": ko, "vo0": vo}


def _table(seed: int, looping: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if looping:   # few distinct next tokens: the text falls into loops a draft can quote
        return rng.choice([1, 2, 3], size=(V, V))
    return rng.integers(0, V - 1, size=(V, V))


def _run(model: ToyModel, prompt: list[int], n: int, strategy=PLAIN, **kw):
    lay = _layout()
    cache = KVCache(lay)
    res = generate(model, lay, prompt, n, cache=cache, strategy=strategy, clock=model.clock, keep_logits=True,
                   **kw)
    return res, cache


def _speculation(**kw) -> Speculation:
    return Speculation(_layout(), SpeculativeOptions(**kw))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", ["always", "auto"])
def test_speculative_equals_plain_tokens_logits_and_cache(seed, policy):
    prompt = [1, 2, 3, 1, 2]
    plain, pc = _run(ToyModel(_table(seed, True)), prompt, 40, eos_ids=[])
    model = ToyModel(_table(seed, True))
    spec, sc = _run(model, prompt, 40, _speculation(policy=policy), eos_ids=[])
    assert spec.tokens == plain.tokens and spec.stop_reason == plain.stop_reason
    assert all(np.array_equal(a, b) for a, b in zip(spec.logits, plain.logits))
    assert sc.n_past == pc.n_past
    assert sc.k_all is not None and pc.k_all is not None
    assert np.array_equal(sc.k_all, pc.k_all) and np.array_equal(sc.v_all, pc.v_all)   # every slot
    s = spec.speculative
    assert s is not None and s["tokens"] == len(spec.tokens) - 1 == len(spec.decode_s)
    assert s["forwards"] == spec.decode_forwards == s["plain_forwards"] + s["verifications"]
    assert sum(s["accepted_histogram"].values()) == s["verifications"]
    if policy == "always":
        assert s["verifications"] > 0


def test_rejected_drafts_leave_no_entry_behind():
    """A table where drafts fail: every verification rejects at once, and the cache still equals
    plain decoding's in every slot."""
    prompt = [0, 1, 2, 3, 4, 0, 1]
    plain, pc = _run(ToyModel(_table(3, False)), prompt, 16, eos_ids=[])
    spec, sc = _run(ToyModel(_table(3, False)), prompt, 16, _speculation(policy="always"), eos_ids=[])
    assert spec.tokens == plain.tokens
    assert spec.speculative["drafted"] > spec.speculative["accepted"]
    assert np.array_equal(sc.k_all, pc.k_all) and np.array_equal(sc.v_all, pc.v_all)


@pytest.mark.parametrize("max_new", [1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize("seq_len", [0, 12, 19])
def test_drafts_are_cut_by_the_tokens_wanted_and_the_sequence_length(max_new, seq_len):
    prompt = [1, 2, 1, 2, 1, 2]
    table = _table(0, True)
    plain, pc = _run(ToyModel(table), prompt, max_new, eos_ids=[], seq_len=seq_len)
    spec, sc = _run(ToyModel(table), prompt, max_new, _speculation(policy="always"), eos_ids=[], seq_len=seq_len)
    assert (spec.tokens, spec.stop_reason, sc.n_past) == (plain.tokens, plain.stop_reason, pc.n_past)


def test_to_the_end_of_the_context_the_verifier_steps_aside():
    """Past the verifier's cache slots (C - T) plain decode calls take over; no error."""
    prompt = [1, 2, 3]
    plain, _ = _run(ToyModel(_table(1, True)), prompt, 100, eos_ids=[])
    model = ToyModel(_table(1, True))
    spec, sc = _run(model, prompt, 100, _speculation(policy="always"), eos_ids=[])
    assert spec.tokens == plain.tokens and spec.stop_reason == "context" and sc.n_past == C - 1
    assert model.calls["kv_forward"] > 0 and model.calls["prefill_forward"] > 1


def _stop_after(n: int):
    seen: list[int] = []

    def on_token(tok: int) -> bool:
        seen.append(tok)
        return len(seen) == n
    return on_token


def test_a_stop_inside_a_block_keeps_only_the_entries_of_the_tokens_kept():
    prompt = [1, 2, 1, 2, 1, 2]
    table = _table(0, True)
    for stop_after in (1, 2, 3, 5):
        plain, pc = _run(ToyModel(table), prompt, 20, eos_ids=[], on_token=_stop_after(stop_after))
        spec, sc = _run(ToyModel(table), prompt, 20, _speculation(policy="always"), eos_ids=[],
                        on_token=_stop_after(stop_after))
        assert spec.tokens == plain.tokens and len(spec.tokens) == stop_after and spec.stop_reason == "stopped"
        assert sc.n_past == pc.n_past == len(prompt) + stop_after - 1
        assert np.array_equal(sc.k_all, pc.k_all)


def test_the_report_counts_only_the_tokens_kept_when_a_stop_cuts_a_block():
    prompt = [1, 2, 1, 2, 1, 2]
    table = _table(0, True)
    for stop_after in (2, 3, 5):
        spec, _ = _run(ToyModel(table), prompt, 20, _speculation(policy="always"), eos_ids=[],
                       on_token=_stop_after(stop_after))
        s = spec.speculative
        assert s["tokens"] == len(spec.decode_s) == stop_after - 1
        assert s["accepted"] <= s["tokens"] and s["forwards"] == spec.decode_forwards


@pytest.mark.parametrize("policy", ["never", "always", "auto"])
def test_plain_through_the_verifier_hands_over_to_the_decode_method_at_its_last_slot(policy):
    """The verifier's cache holds C - T entries; past them its undrafted steps go through the
    decode method, to the end of the context, as plain decoding does."""
    prompt = [1, 2, 3]
    plain, pc = _run(ToyModel(_table(1, True)), prompt, 100, eos_ids=[])
    model = ToyModel(_table(1, True))
    spec, sc = _run(model, prompt, 100, _speculation(policy=policy, plain_via_verifier=True), eos_ids=[])
    assert spec.tokens == plain.tokens and spec.stop_reason == "context" and sc.n_past == pc.n_past
    assert model.calls["kv_forward"] > 0


def test_an_eos_inside_a_draft_ends_the_generation_there():
    table = _table(0, True)
    table[1, 2], table[2, 3] = 3, 5      # ... 1 2 -> 3, then 2 3 -> the EOS
    prompt = [1, 2, 3, 5, 4, 0, 1, 2]    # the draft after (1, 2, 3) quotes 5 4 0 ...
    plain, _ = _run(ToyModel(table), prompt, 30)
    spec, _ = _run(ToyModel(table), prompt, 30, _speculation(policy="always"))
    assert spec.tokens == plain.tokens == [3, 5] and spec.stop_reason == "eos"
    assert spec.speculative["verifications"] == 1 and spec.speculative["accepted"] == 1


def test_auto_drafts_only_where_the_measured_yield_pays_for_a_verification():
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    # looping text, a verification as dear as 2 plain calls: drafting turns on and pays
    model = ToyModel(_table(0, True), verify_cost=2.0)
    spec, _ = _run(model, prompt, 40, _speculation(), eos_ids=[])
    s = spec.speculative
    assert s["verifications"] > 0 and s["tokens_per_forward"] > 1.5
    # the same text, a verification as dear as 30 plain calls: drafts are judged, never verified
    model = ToyModel(_table(0, True), verify_cost=30.0)
    spec, _ = _run(model, prompt, 40, _speculation(), eos_ids=[])
    s = spec.speculative
    assert s["verifications"] == 0 and s["shadow_drafts_judged"] > 0
    assert model.calls["prefill_forward"] == 2        # the prompt's two windows only


def test_a_draft_that_keeps_holding_turns_drafting_on_before_it_ends():
    from qnnrt.llm.speculative import CostMeter, DraftSwitch
    meter = CostMeter()
    meter.add("verify", 4.0)
    meter.add("plain", 1.0)
    sw = DraftSwitch(meter, "verify", "plain")
    seq = [9, 1, 2, 3]
    sw.watch(len(seq), [4, 5, 6, 7, 8, 9, 10, 11])
    for tok in (4, 5, 6):
        seq.append(tok)
        sw.settle(seq)
        assert not sw.pays()               # 1 + 3 tokens held: not yet more than a verification costs
    seq.append(7)
    sw.settle(seq)
    assert sw.pays() and not sw.outcomes   # 5 > 4, while the draft is still being judged
    seq.append(0)
    sw.settle(seq)
    assert list(sw.outcomes) == [5] and sw.pays()


def test_sampled_speculative_generation_is_reproducible_and_counts_every_token():
    prompt = [1, 2, 3, 1, 2]
    runs = []
    for _ in range(2):
        spec, sc = _run(ToyModel(_table(2, True)), prompt, 15, _speculation(policy="always"), eos_ids=[],
                        sampler=Sampler(SamplingOptions(temperature=1.0, seed=5)))
        runs.append(spec.tokens)
        assert sc.n_past == len(prompt) + len(spec.tokens) - 1
    assert runs[0] == runs[1] and len(runs[0]) == 15


def test_a_file_without_a_multi_token_method_cannot_speculate():
    with pytest.raises(LayoutError, match="several tokens"):
        Speculation(_layout(T=1), SpeculativeOptions())
    with pytest.raises(InputError):
        SpeculativeOptions(policy="sometimes")
