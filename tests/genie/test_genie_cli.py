"""A Genie bundle through the CLI as a user runs it (no terminal): `qnnrt inspect BUNDLE`, `qnnrt
llm BUNDLE` (tokens equal the maker's float reference, greedy: the bundle's own sampler is top-k 1)
with ids or text, speculative prompt-lookup through the prompt graph, and bad bundles refused with
one clear line; `qnnrt.load(BUNDLE)` in Python."""
from __future__ import annotations

import json

import numpy as np
import pytest

import qnnrt
from tests.genie.conftest import edit_config
from tests.helpers.cli_helpers import qnnrt as qnnrt_cli
from tests.helpers.data import GENIE_F32, GENIE_F32_SHARED, GENIE_W8A16, executorch_pte


def _ids(xs) -> str:
    return ",".join(map(str, xs))


def test_inspect_shows_the_variants_parts_and_layout():
    r = qnnrt_cli("inspect", GENIE_F32, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["kind"] == "genie" and len(d["binaries"]) == 4
    v = {x["name"]: x for x in d["variants"]}
    assert sorted(v) == ["prompt", "token"] and (v["prompt"]["ar"], v["token"]["ar"]) == (16, 1)
    assert [p["graph"] for p in v["token"]["parts"]] == [f"token_ar1_cl128_{i}_of_4" for i in range(1, 5)]
    assert d["llm"]["n_layers"] == 4 and d["llm"]["context_len"] == 128 and d["llm"]["positions"] == "rope"
    text = qnnrt_cli("inspect", GENIE_F32)
    assert text.returncode == 0, text.stderr
    assert "Genie bundle, 4 context binaries, 2 variant(s)" in text.stdout
    assert "method prompt (AR 16): 4 part(s)" in text.stdout and "weight sharing no" in text.stdout


def test_llm_generates_the_float_references_tokens(references, tmp_path):
    ref = references[0]
    report = tmp_path / "r.json"
    r = qnnrt_cli("llm", GENIE_F32, "--prompt-tokens", _ids(ref["prompt_ids"]),
                  "--max-new-tokens", str(len(ref["tokens"])), "--ignore-eos", "--report", report)
    assert r.returncode == 0, r.stderr
    d = json.loads(report.read_text())
    assert d["generated_tokens"] == ref["tokens"]
    assert d["method_calls"]["prompt"] == 1 and d["method_calls"]["token"] == len(ref["tokens"]) - 1
    assert d["layout"]["prefill_method"] == "prompt" and d["layout"]["eos_ids"] == [1]


@pytest.mark.parametrize("given", [True, False], ids=["--tokenizer", "its own"])
def test_llm_text_in_text_out_with_the_bundles_tokenizer(references, tmp_path, given):
    """Text in and out through the bundle's tokenizer, named or (a bundle carries one) not."""
    ref = references[1]
    report = tmp_path / "r.json"
    r = qnnrt_cli("llm", GENIE_F32, "--prompt", ref["prompt"], *(["--tokenizer", GENIE_F32] if given else []),
                  "--max-new-tokens", str(len(ref["tokens"])), "--ignore-eos", "--report", report)
    assert r.returncode == 0, r.stderr
    d = json.loads(report.read_text())
    assert d["prompt_token_ids"] == ref["prompt_ids"]    # the config's BOS prepended
    assert d["generated_tokens"] == ref["tokens"] and d["text"] == ref["text"]


def test_serve_asks_a_pte_for_its_tokenizer():
    r = qnnrt_cli("serve", executorch_pte("add_relu_mul_fp16"), "--port", "0")
    assert r.returncode == 1
    assert "give --tokenizer DIR" in r.stderr and "Traceback" not in r.stderr


def test_speculative_prompt_lookup_verifies_with_the_prompt_graph(references, tmp_path):
    ref = max(references, key=lambda x: len(x["tokens"]))
    report = tmp_path / "r.json"
    r = qnnrt_cli("llm", GENIE_F32, "--prompt-tokens", _ids(ref["prompt_ids"]), "--ignore-eos",
                  "--max-new-tokens", str(len(ref["tokens"])), "--speculative", "prompt-lookup",
                  "--draft-policy", "always", "--report", report)
    assert r.returncode == 0, r.stderr
    d = json.loads(report.read_text())
    assert d["generated_tokens"] == ref["tokens"]
    assert d["speculative"]["verifications"] >= 1 and d["method_calls"]["prompt"] > 1


def test_python_load_runs_the_token_method_on_its_parts():
    with qnnrt.load(GENIE_F32) as p:
        assert sorted(p.methods) == ["prompt", "token"]
        m = p.methods["token"]
        assert len(m.graph_calls) == 4
        ins = {s.name: np.zeros(s.shape, s.dtype) for s in m.inputs}
        out = p.run("token", ins)
        assert out["logits"].shape == (1, 1, 384) and np.isfinite(out["logits"]).all()
        assert out["past_key_3_out"].shape == (2, 1, 16, 1)


def _fails(*args) -> str:
    r = qnnrt_cli(*args)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "bug in qnnrt" not in r.stderr
    return r.stderr


def test_a_bundle_with_a_missing_binary_or_bad_json_is_refused_clearly(bundle_copy):
    (bundle_copy / "tiny_llama_part_3_of_4.bin").unlink()
    err = _fails("llm", bundle_copy, "--prompt-tokens", "0,5")
    assert "ctx-bins[2] names 'tiny_llama_part_3_of_4.bin', but" in err and "does not exist" in err
    (bundle_copy / "genie_config.json").write_text("{ not json")
    assert "not valid JSON (line 1, column 3" in _fails("inspect", bundle_copy)


def test_a_bundle_with_a_part_missing_is_refused_clearly(bundle_copy):
    edit_config(bundle_copy, lambda d: d["dialog"]["engine"]["model"]["binary"]["ctx-bins"].remove(
        "tiny_llama_part_2_of_4.bin"))
    err = _fails("llm", bundle_copy, "--prompt-tokens", "0,5")
    assert "no graph of part(s) [2] of 4 in the binaries" in err and "ctx-bins" in err


def test_a_weight_shared_bundle_is_refused_on_the_simulator_in_one_line():
    err = _fails("llm", GENIE_F32_SHARED, "--prompt-tokens", "0,5")
    line = next(x for x in err.splitlines() if "weight sharing" in x)
    assert "compiled with HTP weight sharing" in line and "x86 simulator" in line
    r = qnnrt_cli("inspect", GENIE_F32_SHARED)
    assert r.returncode == 0 and "weight sharing yes (the x86 simulator cannot run it)" in r.stdout


@pytest.mark.parametrize("field, value, says", [
    ("eos-token", 500, "dialog.context.eos-token 500 is not below the graphs' 384 logits"),
    ("size", 256, "dialog.context.size is 256 but the graphs hold 128 positions"),
])
def test_a_config_that_does_not_fit_the_graphs_is_refused_clearly(bundle_copy, field, value, says):
    edit_config(bundle_copy, lambda d: d["dialog"]["context"].__setitem__(field, value))
    assert says in _fails("llm", bundle_copy, "--prompt-tokens", "0,5")


@pytest.mark.parametrize("residency", ["bounded:3", "multi-pd:2"])
def test_residency_across_parts_keeps_the_tokens(references, tmp_path, residency):
    """Four part contexts (each holding both variants) evicted to three live, or spread over two PDs (a worker process
    running its parts on the caller's arena arrays): the same tokens."""
    ref = references[0]
    report = tmp_path / "r.json"
    r = qnnrt_cli("llm", GENIE_F32, "--prompt-tokens", _ids(ref["prompt_ids"]), "--ignore-eos",
                  "--max-new-tokens", "8", "--residency", residency, "--report", report)
    assert r.returncode == 0, r.stderr
    d = json.loads(report.read_text())
    assert d["generated_tokens"] == ref["tokens"][:8]
    if residency == "bounded:3":
        assert d["residency"]["peak_live"] == 3 and d["residency"]["evictions"] > 0   # of 4 parts


def test_the_quantized_bundle_gives_its_graphs_tokens(tmp_path):
    """uint16 activations, uint8 KV with the graphs' own encodings (mask and RoPE rows quantized,
    logits dequantized): the quantized graphs' tokens, which leave the float reference's at the
    4th token on this prompt (Genie's are the same: tests/genie/test_genie_bundle.py)."""
    ref = json.loads((GENIE_W8A16 / "references.json").read_text())["references"][0]
    n = 8
    assert ref["quantized_tokens"][:n] != ref["tokens"][:n]     # the prompt tells the two apart
    report = tmp_path / "r.json"
    r = qnnrt_cli("llm", GENIE_W8A16, "--prompt-tokens", _ids(ref["prompt_ids"]), "--ignore-eos",
                  "--max-new-tokens", str(n), "--report", report)
    assert r.returncode == 0, r.stderr
    d = json.loads(report.read_text())
    assert d["generated_tokens"] == ref["quantized_tokens"][:n]
    assert (d["layout"]["cache_dtype"], d["layout"]["mask_dtype"]) == ("uint8", "uint16")


def test_inspect_states_what_genie_leaves_unused_and_where_qnnrt_differs(bundle_copy):
    """n-vocab beside the logits, greedy: true beside a temperature, the penalty window, BOS, the seed."""
    def change(d):
        d["dialog"]["context"]["n-vocab"] = 500
        d["dialog"]["sampler"].update({"greedy": True, "temp": 0.7, "top-k": 0, "token-penalty": {
            "version": 1, "penalize-last-n": 0, "repetition-penalty": 1.2}})
        d["dialog"]["stop-sequence"] = [" and"]
    edit_config(bundle_copy, change)
    r = qnnrt_cli("inspect", bundle_copy)
    assert r.returncode == 0, r.stderr
    notes = [x.strip()[len("note: "):] for x in r.stdout.splitlines() if x.strip().startswith("note: ")]
    assert notes[:4] == ["n-vocab 500 is not the logits' 384: both sample over the logits",
                         "greedy: true is unused: Genie samples at temp 0.7, top-k 0 (so does qnnrt)",
                         "token-penalty is unused: penalize-last-n is 0",
                         "seed 42: qnnrt's random stream is not Genie's (the same seed samples other tokens)"]
    assert any(n.startswith("BOS 0: Genie prepends it to every query") for n in notes)
    assert "stops: ids [1], text ' and'" in r.stdout


def test_add_bos_prepends_it_as_genie_does(references, tmp_path):
    """--prompt-tokens run as given; --add-bos prepends the config's BOS (Genie's query)."""
    ref = references[0]
    report = tmp_path / "r.json"
    r = qnnrt_cli("llm", GENIE_F32, "--prompt-tokens", _ids(ref["prompt_ids"][1:]), "--add-bos",
                  "--max-new-tokens", "8", "--ignore-eos", "--report", report)
    assert r.returncode == 0, r.stderr
    d = json.loads(report.read_text())
    assert d["prompt_token_ids"] == ref["prompt_ids"] and d["generated_tokens"] == ref["tokens"][:8]
