"""Lookahead decoding (llm/lookahead.py) on a file ExecuTorch 1.5.1's llama scripts exported with
``--model_mode lookahead --ngram 3 --window 2 --gcap 2`` (tests/data/llm/lookahead_stories: the
llama_stories_fp16 model, a decode window of 8 slots). The trace files hold, step by step, the
slots, positions, guesses and acceptances of ExecuTorch's runner algorithm run on this file
through ExecuTorch's own runtime; qnnrt must send the same slots and accept the same tokens."""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np
import pytest

from qnnrt import load
from qnnrt.cli.main import main
from qnnrt.errors import InputError
from qnnrt.llm import LlmRunner
from qnnrt.llm.kv_cache import KVCache, WindowTree, build_step_inputs
from qnnrt.llm.layout import MethodLayout
from qnnrt.llm.lookahead import CRand, LookaheadOptions, LookaheadParams, NgramPool, StepLayout
from qnnrt.llm.speculative import SpeculativeOptions
from tests.helpers.data import LLM_STORIES, LOOKAHEAD_STORIES

DATA = LOOKAHEAD_STORIES
LOOKAHEAD = SpeculativeOptions(mode="lookahead")


# -- numpy only ---------------------------------------------------------------------------------------
def test_c_rand_is_glibc_rand_for_an_unseeded_process():
    r = CRand()
    assert [r() for _ in range(3)] == [1804289383, 846930886, 1681692777]


def test_step_layout_for_ngram_3_window_2_gcap_2():
    at = StepLayout(LookaheadParams(3, 2, 2), 8)
    assert at.tree.offsets == (0, 1, 1, 2, 1, 2, 1, 2)
    want = np.array([[1, 0, 0, 0, 0, 0, 0, 0],     # the current token
                     [1, 1, 0, 0, 0, 0, 0, 0],     # level 0, column 1
                     [1, 0, 1, 0, 0, 0, 0, 0],     # level 1, column 0
                     [1, 1, 0, 1, 0, 0, 0, 0],     # level 1, column 1
                     [1, 0, 0, 0, 1, 0, 0, 0],     # guess 0
                     [1, 0, 0, 0, 1, 1, 0, 0],
                     [1, 0, 0, 0, 0, 0, 1, 0],     # guess 1
                     [1, 0, 0, 0, 0, 0, 1, 1]], bool)
    assert np.array_equal(at.tree.visible, want)
    assert at.guess_base == 4 and at.last_level == 2


def test_options_fill_the_window_and_refuse_what_does_not_fit():
    assert LookaheadOptions().for_window(8) == LookaheadParams(3, 2, 2)
    assert LookaheadOptions().for_window(16) == LookaheadParams(3, 4, 4)
    assert LookaheadOptions(gcap=0).for_window(8) == LookaheadParams(3, 2, 0)     # no guesses: Jacobi only
    assert LookaheadOptions(ngram=5, window=1, gcap=1).for_window(8).slots == 8
    with pytest.raises(InputError, match="needs"):
        LookaheadOptions(3, 4, 2).for_window(8)


def test_pool_keeps_gcap_continuations_oldest_out_first_without_duplicates():
    p = NgramPool(2)
    for v in [(1, 2), (1, 2), (3, 4), (5, 6)]:
        p.add(7, v)
    assert p.guesses(7) == [(5, 6), (3, 4)] and p.guesses(8) == []


def test_a_tree_call_writes_its_mask_and_positions_and_keeps_the_chosen_slots():
    from tests.llm.test_speculative import _layout
    lay = _layout(T=4)
    m: MethodLayout = lay.prefill
    tree = WindowTree.from_parents([-1, 0, 0, 2], [0, 1, 1, 2])
    cache = KVCache(lay)
    cache.n_past = 3

    inp = build_step_inputs(lay, m, cache, [5, 6, 7, 8], tree=tree)
    assert inp["input_pos"].tolist() == [[3, 4, 4, 5]]
    win = inp["atten_mask"][0, 0, :, -4:] == m.mask_open
    assert win.tolist() == [[True, False, False, False], [True, True, False, False],
                            [True, False, True, False], [True, False, True, True]]
    ko = [np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4)]
    vo = [np.arange(8, dtype=np.float32).reshape(1, 1, 4, 2)]
    cache.update(m, ko, vo, 3, slots=[0, 2, 3])
    assert cache.n_past == 6 and cache.k[0][0, 0, :, 3:6].tolist() == [[0, 2, 3], [4, 6, 7]]


# -- the exported file on the simulator ---------------------------------------------------------------
@pytest.fixture(scope="module")
def ref() -> dict:
    return json.loads((DATA / "greedy_reference.json").read_text())


@pytest.fixture(scope="module")
def prog():
    with load(str(DATA / "model.pte")) as p:
        yield p


class Recording:
    """The runner's steps, recording what each lookahead call sent."""

    def __init__(self, steps: Any) -> None:
        self.steps, self.sent = steps, []

    def forward(self, method, cache, tokens: Sequence[int], pad_token: int, tree=None):
        if tree is not None:
            self.sent.append((cache.n_past, list(tokens), list(tree.offsets)))
        return self.steps.forward(method, cache, tokens, pad_token, tree)

    def commit(self, method, cache, n, slots=None):
        return self.steps.commit(method, cache, n, slots)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["fixture", "repetitive"])
def test_lookahead_follows_executorchs_runner_step_by_step(prog, ref, which):
    trace = json.loads((DATA / f"trace_{which}.json").read_text())
    runner = LlmRunner(prog, speculative=LOOKAHEAD)
    assert runner.layout.mode == "lookahead" and runner.layout.decode.ar_len == 8
    rec = Recording(runner.steps)
    runner.steps = rec
    res = runner.generate(ref[f"{which}_prompt"], 200, eos_ids=[])
    assert res.tokens[:64] == ref[f"{which}_greedy_64"]
    assert res.tokens == trace["generated"][:len(res.tokens)]
    assert len(rec.sent) == res.decode_forwards == res.speculative["forwards"]
    for (pos, tokens, offsets), step in zip(rec.sent, trace["trace"]):
        used = 4 + 2 * step["n_guesses"]           # level slots, then the guesses found (the rest is stale)
        assert pos == step["pos"]
        assert tokens[:used] == step["tokens"][:used], step["step"]
        assert [pos + o for o in offsets[:used]] == step["input_pos"][:used]
    # every step of the runner's, but one that starts with the cache full (C - T entries): its tokens
    # could never be continued; qnnrt stops before it, with every emitted token's predecessor cached
    full = runner.layout.context_len - runner.layout.decode.ar_len
    assert len(rec.sent) == len([s for s in trace["trace"] if s["pos"] < full])


@pytest.mark.slow
def test_a_stop_inside_a_lookahead_step_counts_only_the_tokens_kept(prog, ref):
    from tests.llm.test_speculative import _stop_after
    res = LlmRunner(prog, speculative=LOOKAHEAD).generate(ref["fixture_prompt"], 40, eos_ids=[],
                                                          on_token=_stop_after(21))
    s = res.speculative
    assert res.tokens == ref["fixture_greedy_64"][:21] and res.stop_reason == "stopped"
    assert s["tokens"] == len(res.decode_s) == 20 and s["accepted"] <= s["tokens"]


@pytest.mark.slow
def test_plain_decoding_of_a_lookahead_file_and_prompt_lookup_on_its_window(prog, ref):
    plain = LlmRunner(prog).generate(ref["repetitive_prompt"], 24, eos_ids=[])
    assert plain.tokens == ref["repetitive_greedy_64"][:24] and plain.decode_forwards == 23
    pl = LlmRunner(prog, speculative=SpeculativeOptions(policy="always")).generate(
        ref["repetitive_prompt"], 24, eos_ids=[])
    assert pl.tokens == plain.tokens
    assert pl.speculative["verifications"] > 0
    assert "kv_forward" in pl.speculative["forward_ms"] and len(pl.speculative["forward_ms"]) <= 2


@pytest.mark.slow
def test_cli_decodes_a_lookahead_file_with_lookahead_by_default(tmp_path, ref):
    rep = tmp_path / "r.json"
    ids = ",".join(map(str, ref["fixture_prompt"]))
    assert main(["llm", str(DATA / "model.pte"), "--prompt-tokens", ids, "--max-new-tokens", "30",
                 "--ignore-eos", "--report", str(rep), "--quiet"]) == 0
    r = json.loads(rep.read_text())
    assert r["layout"]["mode"] == "lookahead" and r["speculative"]["mode"] == "lookahead"
    assert r["generated_tokens"] == ref["fixture_greedy_64"][:30]
    assert r["speculative"]["forwards"] < 29
    assert main(["llm", str(DATA / "model.pte"), "--prompt-tokens", ids, "--max-new-tokens", "4",
                 "--speculative", "off", "--report", str(rep), "--quiet"]) == 0
    assert "speculative" not in json.loads(rep.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("flags,says", [
    (["--ngram", "3"], "--ngram applies to --speculative lookahead; this run decodes plainly"),
    (["--speculative", "prompt-lookup", "--gcap", "1"], "--gcap applies to --speculative lookahead"),
    (["--draft-policy", "always"], "--draft-policy applies to --speculative prompt-lookup"),
    (["--speculative", "prompt-lookup", "--draft-max", "99"], "a draft of 99 tokens does not fit"),
    (["--speculative", "prompt-lookup", "--draft-ngram", "0"], "n-gram sizes"),
])
def test_speculative_flags_that_do_not_apply_or_fit_are_clear_errors(flags, says, capfd):
    fix = LLM_STORIES / "model.pte"
    assert main(["llm", str(fix), "--prompt-tokens", "1,2,3", *flags, "--quiet"]) == 1
    err = capfd.readouterr().err
    assert says in err and "Traceback" not in err


@pytest.mark.slow
def test_lookahead_on_a_hybrid_file_says_what_to_use(capfd):
    fix = LLM_STORIES / "model.pte"
    assert main(["llm", str(fix), "--prompt-tokens", "1,2,3", "--speculative", "lookahead", "--quiet"]) == 1
    err = capfd.readouterr().err
    assert "--model_mode lookahead" in err and "prompt-lookup" in err and "Traceback" not in err


# -- bit for bit with ExecuTorch's own runtime ---------------------------------------------------------
ET_IO = DATA / "executorch_io"


def _et(method: str, kind: str) -> list[np.ndarray]:
    files = sorted(ET_IO.glob(f"{method}_{kind}_*.npy"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    return [np.load(f) for f in files]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["prefill_forward", "kv_forward"])
def test_cli_run_is_bit_identical_to_executorch_on_its_own_inputs(method, tmp_path):
    """ExecuTorch 1.5.1's runtime ran this file's methods on this simulator (the prompt's prefill,
    then the first lookahead step with the inputs its runner builds): qnnrt's outputs for the same
    inputs are the same bits."""
    files = sorted(ET_IO.glob(f"{method}_input_*.npy"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    out = tmp_path / "out"
    assert main(["run", str(DATA / "model.pte"), "--method", method, "--inputs", ",".join(map(str, files)),
                 "--output-dir", str(out), "--quiet"]) == 0
    want = _et(method, "output")
    assert len(want) == 9
    for i, w in enumerate(want):
        assert np.array_equal(np.load(out / f"output_{i}.npy"), w), (method, i)


@pytest.mark.slow
def test_the_first_lookahead_step_sends_what_executorchs_runner_sends_and_gets_its_logits(prog, ref):
    """qnnrt's own first lookahead step after the prompt: the tokens, positions and mask pattern
    ExecuTorch's runner built, and the same logits bit for bit (qnnrt's closed mask value is -255,
    ExecuTorch's runner's -65535: both shut a column completely)."""
    runner = LlmRunner(prog, speculative=LOOKAHEAD)
    seen: list[np.ndarray] = []

    class Capture(Recording):
        def forward(self, method, cache, tokens, pad_token, tree=None):
            raw = super().forward(method, cache, tokens, pad_token, tree)
            if tree is not None:
                seen.append(np.array(raw, copy=True))
            return raw

    rec = Capture(runner.steps)
    runner.steps = rec
    runner.generate(ref["fixture_prompt"], 2, eos_ids=[])
    tokens, mask, pos = _et("kv_forward", "input")[:3]
    n_past, sent, offsets = rec.sent[0]
    assert sent == tokens[0].tolist() and [n_past + o for o in offsets][:4] == pos[0, :4].tolist()
    m = runner.layout.decode
    ours = build_step_inputs(runner.layout, m, _cache_at(runner, n_past), sent, tree=rec_tree(runner))[m.inputs[1].name]
    used = 4                       # the window's slots: the first step has no guesses (their slots are stale)
    assert np.array_equal(ours[..., :used, :] == m.mask_open, mask[..., :used, :] == 0.0)
    assert np.array_equal(seen[0][:, :used], _et("kv_forward", "output")[0][:, :used])


def _cache_at(runner: LlmRunner, n_past: int) -> KVCache:
    cache = KVCache(runner.layout)
    cache.n_past = n_past
    return cache


def rec_tree(runner: LlmRunner) -> WindowTree:
    return StepLayout(LookaheadOptions().for_window(runner.layout.decode.ar_len), runner.layout.decode.ar_len).tree


@pytest.mark.slow
def test_lookahead_parameters_that_do_not_fit_the_window_are_a_clear_error(ref, capfd):
    ids = ",".join(map(str, ref["fixture_prompt"]))
    assert main(["llm", str(DATA / "model.pte"), "--prompt-tokens", ids, "--ngram", "4", "--window", "3",
                 "--quiet"]) == 1
    err = capfd.readouterr().err
    assert "(window + gcap) x (ngram - 1) = 12 slots" in err and "has 8" in err and "Traceback" not in err
