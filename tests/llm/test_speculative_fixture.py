"""Speculative decoding on the real simulator: the ExecuTorch-made fp16 LLM fixture and the tiny
quantized / kv-only files, through the prepared step, the CLI and a KV cache kept across turns.

Greedy speculative output equals plain decoding's (kv_forward) here. Where the two graphs could
round a near tie differently, the reference is plain decoding through the verifier itself
(`plain_via_verifier`): checked too. The HTP does not round a row of the window the same way at
every row index (rows past the first 16 differ in the last fp16 bit), so the logits of a long
accepted draft equal the one-token calls' within fp16 rounding, not bit for bit."""
from __future__ import annotations

import json

import numpy as np
import pytest

from qnnrt import load
from qnnrt.cli.main import main
from qnnrt.llm import LlmRunner
from qnnrt.llm.errors import LayoutError
from qnnrt.llm.session import CachedGenerator
from qnnrt.llm.speculative import SpeculativeOptions
from tests.helpers.data import LLM_STORIES

FIX = LLM_STORIES
pytestmark = pytest.mark.slow
N_NEW = 64


@pytest.fixture(scope="module")
def prompts() -> dict[str, list[int]]:
    p = json.loads((FIX / "meta.json").read_text())["prompt"]
    return {"fixture": p, "repeated": p[:16] * 2}


@pytest.fixture(scope="module")
def prog():
    with load(str(FIX / "model.pte")) as p:
        yield p


@pytest.fixture(scope="module")
def plain(prog, prompts) -> dict:
    r = LlmRunner(prog)
    return {k: r.generate(p, N_NEW, eos_ids=[]) for k, p in prompts.items()}


@pytest.mark.parametrize("policy", ["auto", "always"])
def test_greedy_speculative_equals_plain_decoding_for_64_tokens(prog, prompts, plain, policy):
    r = LlmRunner(prog, speculative=SpeculativeOptions(policy=policy))
    for name, p in prompts.items():
        res = r.generate(p, N_NEW, eos_ids=[])
        assert res.tokens == plain[name].tokens, name
        s = res.speculative
        assert s is not None and s["tokens"] == N_NEW - 1
        if name == "repeated":   # the text falls into a loop the drafts quote: auto drafts there too
            assert s["verifications"] > 0 and s["accepted"] > 0 and s["tokens_per_forward"] >= 1.5, s


def test_plain_through_the_verifier_is_the_reference_where_the_graphs_round_differently(prog, prompts):
    opts = SpeculativeOptions(policy="never", plain_via_verifier=True)
    ref = LlmRunner(prog, speculative=opts).generate(prompts["repeated"], 40, eos_ids=[], keep_logits=True)
    spec = LlmRunner(prog, speculative=SpeculativeOptions(policy="always", plain_via_verifier=True)).generate(
        prompts["repeated"], 40, eos_ids=[], keep_logits=True)
    assert ref.speculative["verifications"] == 0 and spec.speculative["verifications"] > 0
    assert spec.tokens == ref.tokens
    assert max(float(np.abs(a - b).max()) for a, b in zip(spec.logits, ref.logits)) <= 2e-3


def test_kv_reuse_across_turns_with_speculation_equals_plain(prog, prompts):
    outs = []
    for spec in (None, SpeculativeOptions(policy="always")):
        gen = CachedGenerator(LlmRunner(prog, speculative=spec))
        r1, _ = gen.generate(prompts["repeated"], 12, eos_ids=[])
        turn2 = prompts["repeated"] + r1.tokens + prompts["repeated"][:6]
        r2, reused = gen.generate(turn2, 20, eos_ids=[])
        outs.append((r1.tokens, r2.tokens, reused, gen.cache.n_past, gen.tokens))
    assert outs[0] == outs[1]
    assert outs[1][2] == len(prompts["repeated"]) + 11


def test_cli_reports_the_speculative_section_and_cycles(tmp_path, prompts, plain):
    rep = tmp_path / "r.json"
    ids = ",".join(map(str, prompts["repeated"]))
    assert main(["llm", str(FIX / "model.pte"), "--prompt-tokens", ids, "--max-new-tokens", "24", "--ignore-eos",
                 "--speculative", "prompt-lookup", "--draft-policy", "always", "--profile-level", "detailed",
                 "--report", str(rep), "--quiet"]) == 0
    r = json.loads(rep.read_text())
    s = r["speculative"]
    assert r["generated_tokens"] == plain["repeated"].tokens[:24]
    assert s["mode"] == "prompt-lookup" and s["forwards"] == r["decode_forwards"] < 23
    assert s["verifications"] >= 1 and sum(s["accepted_histogram"].values()) == s["verifications"]
    assert r["accel_cycles_per_decoded_token"] > 0
    # each decode-phase call is one graph execution here; at its graph's floor it costs no more
    assert sum(r["decode_executions"].values()) == r["decode_forwards"]
    assert 0 < r["accel_cycles_floor_per_decoded_token"] <= r["accel_cycles_per_decoded_token"]
    assert r["method_calls"]["prefill_forward"] == 1 + s["verifications"]


# -- the tiny files (quantized caches and logits; kv-only) --------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.helpers.llm_pte import TinyLlm
    model = TinyLlm(seed=7)
    return model, model.binaries(tmp_path_factory.mktemp("tiny_llm"))


def test_quantized_file_speculative_equals_plain(tiny, tmp_path):
    from tests.helpers.llm_pte import write_pte
    model, binaries = tiny
    with load(str(write_pte(model, binaries, tmp_path / "q.pte"))) as p:
        prompt = [30, 20, 22, 30, 20, 22]
        a = LlmRunner(p).generate(prompt, 9, eos_ids=[])
        run = LlmRunner(p, speculative=SpeculativeOptions(policy="always"))
        assert run.layout.quantized
        b = run.generate(prompt, 9, eos_ids=[])
        assert b.tokens == a.tokens and b.speculative["tokens"] == 8 and b.speculative["verifications"] >= 1


def test_kv_only_file_cannot_speculate_and_the_cli_says_why(tiny, tmp_path, capfd):
    from tests.helpers.llm_pte import write_pte
    model, binaries = tiny
    pte = write_pte(model, binaries, tmp_path / "kv.pte", float_io=True, method_order=("kv_forward",))
    with load(str(pte)) as p, pytest.raises(LayoutError, match="several tokens"):
        LlmRunner(p, speculative=SpeculativeOptions(), create_contexts=False)
    assert main(["llm", str(pte), "--prompt-tokens", "1,2,3", "--speculative", "prompt-lookup", "--quiet"]) == 1
    err = capfd.readouterr().err
    assert "speculative decoding" in err and "kv_forward" in err and "Traceback" not in err


def test_speculation_with_the_prefill_context_in_a_pd_worker_equals_plain(tiny, tmp_path):
    """Multi-PD: the verifier's context in a worker process reads the arena caches; drafts,
    acceptance and commits are this process's, so the output is plain decoding's."""
    from tests.helpers.llm_pte import write_pte
    model, binaries = tiny
    with load(str(write_pte(model, binaries, tmp_path / "m.pte", float_io=True)), residency="multi-pd:2") as p:
        assert sorted(p.hosts.host_of(k) for k in p.binaries) == [0, 1]
        prompt = [30, 20, 22, 30, 20, 22]
        a = LlmRunner(p).generate(prompt, 9, eos_ids=[])
        b = LlmRunner(p, speculative=SpeculativeOptions(policy="always")).generate(prompt, 9, eos_ids=[])
        assert b.tokens == a.tokens and b.speculative["tokens"] == 8 and b.speculative["verifications"] >= 1


def test_rejected_drafts_leave_the_cache_as_a_run_that_never_drafted(prog, prompts):
    """On the real graphs: after a speculative run with rejected drafts, the slots past n_past were
    never written, and the kept entries are those of plain decoding through the verifier (equal
    within the window rows' fp16 rounding)."""
    caches = {}
    for policy in ("never", "always"):
        runner = LlmRunner(prog, speculative=SpeculativeOptions(policy=policy, plain_via_verifier=True))
        cache = runner.new_cache()
        res = runner.generate(prompts["fixture"], 24, eos_ids=[], cache=cache)
        caches[policy] = (cache, res)
    (a, ra), (b, rb) = caches["never"], caches["always"]
    assert rb.speculative["drafted"] > rb.speculative["accepted"]        # some drafts were rejected
    assert ra.tokens == rb.tokens and a.n_past == b.n_past
    n = b.n_past
    assert a.k_all is not None and b.k_all is not None and a.v_all is not None and b.v_all is not None
    assert not np.any(b.k_all[..., n:]) and not np.any(b.v_all[:, :, :, n:, :])
    assert float(np.abs(a.k_all - b.k_all).max()) <= 2e-3 and float(np.abs(a.v_all - b.v_all).max()) <= 2e-3
