"""Config shapes Genie runs (Qualcomm's sample and tutorial configs write them), each run by libGenie.so
and by qnnrt on the same edited copy of the tiny float bundle: the same greedy tokens. Also the token
penalty as Genie applies it (over the last n tokens, prompt included) and its stop-sequence on text."""
from __future__ import annotations

import json

import pytest

import qnnrt
from qnnrt.llm import Sampler, SamplingOptions
from qnnrt.llm.runner import LlmRunner
from tests.genie.conftest import copy_bundle, edit_config, positional_encoding as _pe
from tests.helpers.cli_helpers import qnnrt as qnnrt_cli
from tests.helpers.data import GENIE_F32, GENIE_WHOLE_F32
from tests.helpers.genie_bundle import Bundle, run_genie

PROMPT = [85, 73, 70, 379, 366]     # "the little robot", without BOS (Genie adds the config's)
N = 16


def _fcb_and_list(d):
    b = d["dialog"]["engine"]["model"]["binary"]
    b["fcb"] = b.pop("ctx-bins")
    _pe([{"type": "rope", "rope-dim": 8, "rope-theta": 10000}])(d)


CASES = {
    "bos-token -1": lambda d: d["dialog"]["context"].__setitem__("bos-token", -1),
    "n-vocab below the logits": lambda d: d["dialog"]["context"].__setitem__("n-vocab", 300),
    "fcb, positional-encoding list": _fcb_and_list,
    "rope-scaling without rope-type": _pe({"type": "rope", "rope-dim": 8, "rope-theta": 10000, "rope-scaling": {
        "factor": 8.0, "low-freq-factor": 1.0, "high-freq-factor": 4.0, "original-max-position-embeddings": 32}}),
    "llama3": _pe({"type": "rope", "rope-dim": 8, "rope-theta": 10000, "rope-scaling": {
        "rope-type": "llama3", "factor": 8.0, "low-freq-factor": 1.0, "high-freq-factor": 4.0,
        "original-max-position-embeddings": 32}}),
    "longrope": _pe({"type": "rope", "rope-dim": 8, "rope-theta": 10000, "rope-scaling": {
        "rope-type": "longrope", "factor": 4.0, "original-max-position-embeddings": 64,
        "long-factor": [1, 1.5, 2, 3, 4, 5, 6, 8], "short-factor": [1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7]}}),
    "eot-token": lambda d: d["dialog"]["context"].__setitem__("eot-token", 370),
}


def _genie_tokens(bundle, *args: str) -> list[int]:
    done = run_genie(bundle, "--prompt-tokens", ",".join(map(str, PROMPT)), "--max-new-tokens", str(N), *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["tokens"]


@pytest.mark.parametrize("case", list(CASES))
def test_qnnrt_runs_the_shape_as_genie_does(genie_library, bundle_copy, case) -> None:
    edit_config(bundle_copy, CASES[case])
    want = _genie_tokens(bundle_copy)
    with qnnrt.load(bundle_copy) as p:
        runner = LlmRunner(p)
        bos = runner.layout.bos_id
        res = runner.generate(([bos] if bos is not None else []) + PROMPT, N)
    got = res.tokens[:-1] if res.stop_reason == "eos" else res.tokens    # Genie emits no stop id
    assert got == want
    if case == "eot-token":
        assert res.stop_reason == "eos" and res.tokens[-1] == 370 and len(got) < N


def test_repetition_penalty_counts_the_last_n_tokens_prompt_included(genie_library, tmp_path) -> None:
    """Genie penalizes only where it samples: at temp 0.01 its choice is the penalized argmax, which
    qnnrt's greedy sampler with the same penalty and window gives (and not without the prompt), and
    `qnnrt llm` with the config's sampler too."""
    b = copy_bundle(GENIE_F32, tmp_path / "b")
    pen = {"version": 1, "repetition-penalty": 1.3, "penalize-last-n": 64}
    edit_config(b, lambda d: d["dialog"]["sampler"].update({"temp": 0.01, "top-k": 0, "top-p": 1.0, "seed": 3,
                                                            "token-penalty": pen}))
    want = _genie_tokens(b)
    prompt = [0] + PROMPT
    options = SamplingOptions(repetition_penalty=1.3, penalty_last_n=64)
    with qnnrt.load(GENIE_F32) as p:
        runner = LlmRunner(p)
        got = runner.generate(prompt, N, sampler=Sampler(options, history=prompt), eos_ids=()).tokens
        without_prompt = runner.generate(prompt, N, sampler=Sampler(options), eos_ids=()).tokens
    assert got == want and without_prompt != want
    report = tmp_path / "r.json"            # the config's sampler and penalty through `qnnrt llm` (seeded)
    r = qnnrt_cli("llm", b, "--prompt-tokens", ",".join(map(str, PROMPT)), "--add-bos", "--max-new-tokens",
                  str(N), "--ignore-eos", "--report", report)
    assert r.returncode == 0, r.stderr
    assert json.loads(report.read_text())["generated_tokens"] == want


def test_stop_sequence_cuts_text_as_genie_does(genie_library, bundle_copy, tmp_path) -> None:
    """`qnnrt llm --prompt`: the text before the first stop sequence, as Genie's text query gives it;
    a stop sequence inside a token cuts it there."""
    edit_config(bundle_copy, lambda d: d["dialog"].__setitem__("stop-sequence", ["nd o", "zzz"]))
    done = run_genie(bundle_copy, "--prompt", "the little robot", "--max-new-tokens", "24")
    assert done.returncode == 0, done.stderr[-3000:]
    genie = json.loads(done.stdout)["text"]
    report = tmp_path / "r.json"
    r = qnnrt_cli("llm", bundle_copy, "--prompt", "the little robot", "--tokenizer", bundle_copy,
                  "--max-new-tokens", "24", "--report", report)
    assert r.returncode == 0, r.stderr
    d = json.loads(report.read_text())
    assert d["text"] == genie == " green oldanight little ranupon little a"
    assert d["stop_reason"] == "stop_sequence" and d["n_generated"] < 24


def test_one_binary_per_ar_with_two_context_lengths(genie_library, tmp_path) -> None:
    """tiny_llama_whole_f32: ctx-bins [the AR-16 binary, the AR-1 binary], each graph the whole model
    (no _i_of_N), at CL 128 and 64. qnnrt runs the smallest variant holding the context size (Genie
    starts at CL 64 and grows into 128: the same tokens) and gives Genie's on 4 prompts x 24 tokens."""
    from qnnrt.cli.inspect_genie import describe_genie
    assert describe_genie(GENIE_WHOLE_F32)["context_lengths"] == [64, 128]
    refs = Bundle.load(GENIE_WHOLE_F32).meta["references"]
    with qnnrt.load(GENIE_WHOLE_F32) as p:
        assert [r.spec.name for r in p.methods["token"].refs] == ["token_ar1_cl128"]
        runner = LlmRunner(p)
        got = [runner.generate(r["prompt_ids"], 24, eos_ids=()).tokens for r in refs]
    assert got == [r["genie_tokens"] for r in refs]
    b = copy_bundle(GENIE_WHOLE_F32, tmp_path / "b")
    edit_config(b, lambda d: d["dialog"]["context"].__setitem__("size", 64))
    first = refs[0]
    with qnnrt.load(b) as p:
        assert [r.spec.name for r in p.methods["prompt"].refs] == ["prompt_ar16_cl64"]
        assert LlmRunner(p).generate(first["prompt_ids"], 24, eos_ids=()).tokens == first["genie_tokens"]
    done = run_genie(b, "--prompt-tokens", ",".join(map(str, first["prompt_ids"][1:])), "--max-new-tokens", "24")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["tokens"] == first["genie_tokens"]
