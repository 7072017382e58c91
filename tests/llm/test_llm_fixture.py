"""`qnnrt run` / `qnnrt llm` on the ExecuTorch Qualcomm LLM fixture (llama_stories_fp16, as the
ExecuTorch scripts wrote it: 17 methods, 15 of them constants), on the real x86 HTP simulator."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from qnnrt.cli.main import main
from qnnrt.llm.text import INSTALL_HINT
from tests.helpers.cli_helpers import ROOT
from tests.helpers.data import LLM_STORIES, WEIGHT_SHARED_BIN

FIX = LLM_STORIES
TOL = 0.02  # fp16 (ExecuTorch's own run: ~0.003 max abs error)


@pytest.fixture(scope="module")
def meta() -> dict:
    return json.loads((FIX / "meta.json").read_text())


def _inputs(method: str) -> str:
    files = sorted((FIX / "inputs").glob(f"{method}_input_*.npy"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    return ",".join(map(str, files))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["prefill_forward", "kv_forward"])
def test_run_each_method_matches_reference_and_repeats(method, tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(FIX / "model.pte"), "--method", method, "--inputs", _inputs(method),
                 "--iteration", "2", "--check-repeat", "--output-dir", str(out)]) == 0
    for i in range(9):
        got = np.load(out / f"output_{i}.npy")
        ref = np.load(FIX / "ref" / f"{method}_ref_{i}.npy")
        assert got.shape == ref.shape
        assert float(np.abs(got - ref).max()) <= TOL, (method, i)


@pytest.mark.slow
def test_run_interleaved_per_method_inputs(tmp_path):
    rep = tmp_path / "r.json"
    assert main(["run", str(FIX / "model.pte"), "--method", "prefill_forward,kv_forward",
                 "--inputs", f"prefill_forward={_inputs('prefill_forward')}",
                 "--inputs", f"kv_forward={_inputs('kv_forward')}", "--iteration", "2",
                 "--check-repeat", "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert set(r["latency_ms_per_method"]) == {"prefill_forward", "kv_forward"}
    assert r["check_repeat"]["mismatches"] == 0


@pytest.mark.slow
def test_run_per_method_inputs_errors(capfd):
    assert main(["run", str(FIX / "model.pte"), "--method", "prefill_forward,kv_forward",
                 "--inputs", _inputs("prefill_forward")]) == 1
    assert "METHOD=" in capfd.readouterr().err


@pytest.mark.slow
def test_constant_method_is_not_runnable_but_does_not_block(capfd):
    assert main(["run", str(FIX / "model.pte"), "--method", "get_n_layers"]) == 1
    assert "constant method" in capfd.readouterr().err


@pytest.mark.slow
def test_program_constants_and_inspect(meta, capfd):
    import qnnrt
    with qnnrt.load(FIX / "model.pte") as prog:
        assert prog.constants == meta["constant_methods"]
        assert set(prog.methods) == {"prefill_forward", "kv_forward"}
    assert main(["inspect", str(FIX / "model.pte"), "--json"]) == 0
    d = json.loads(capfd.readouterr().out)
    shown = {m["name"]: m["constant"] for m in d["methods"] if "constant" in m}
    assert shown == meta["constant_methods"]
    assert main(["inspect", str(FIX / "model.pte")]) == 0
    text = capfd.readouterr().out
    assert "get_n_layers = 4" in text and "get_use_kv_cache = True" in text
    assert "HTP weight sharing: no" in text


@pytest.mark.slow
def test_llm_generates_the_greedy_continuation(meta, tmp_path, capfd):
    rep = tmp_path / "llm.json"
    n = len(meta["greedy_tokens"])
    assert main(["llm", str(FIX / "model.pte"), "--prompt-tokens", ",".join(map(str, meta["prompt"])),
                 "--max-new-tokens", str(n), "--report", str(rep)]) == 0
    out = capfd.readouterr().out
    r = json.loads(rep.read_text())
    assert r["generated_tokens"] == meta["greedy_tokens"]
    assert r["stop_reason"] == "max_new_tokens"
    assert r["ttft_s"] > 0 and r["prefill_tokens_per_s"] > 0 and r["decode_tokens_per_s"] > 0
    d = r["decode_ms"]
    assert d["n"] == n - 1 and 0 < d["min"] <= d["median"] <= d["p90"]
    assert r["method_calls"] == {"prefill_forward": 1, "kv_forward": n - 1}
    assert "generated: " + " ".join(map(str, meta["greedy_tokens"])) in out
    assert "time to first token" in out


@pytest.mark.slow
def test_llm_score_logits_match_step_references(meta, tmp_path, capfd):
    ids = tmp_path / "ids.txt"
    seq = meta["prompt"] + meta["greedy_tokens"]
    ids.write_text(" ".join(map(str, seq)))
    dump, rep = tmp_path / "logits", tmp_path / "score.json"
    assert main(["llm", str(FIX / "model.pte"), "--score-tokens", str(ids), "--score-prefill", "32",
                 "--dump-logits", str(dump), "--report", str(rep)]) == 0
    pre = np.load(dump / "prefill_forward_s0.npy")
    assert float(np.abs(pre - np.load(FIX / "steps" / "prefill_forward_s0_ref_0.npy")[0]).max()) <= TOL
    for k in range(len(meta["greedy_tokens"]) - 1):
        got = np.load(dump / f"kv_forward_s{k}.npy")
        ref = np.load(FIX / "steps" / f"kv_forward_s{k}_ref_0.npy")[0, 0]
        assert float(np.abs(got - ref).max()) <= TOL, k
    s = json.loads(rep.read_text())["score"]
    rows = np.load(dump / "logits.npy")
    assert rows.shape == (len(seq) - 1, 512)
    # the log-likelihoods are those of the dumped logits
    lse = np.log(np.exp(rows.astype(np.float64) - rows.max(1, keepdims=True)).sum(1)) + rows.max(1)
    want = rows[np.arange(len(seq) - 1), seq[1:]] - lse
    np.testing.assert_allclose(s["logprobs"], want, rtol=1e-5, atol=1e-5)
    assert s["perplexity"] == pytest.approx(float(np.exp(-np.mean(want))), rel=1e-5)
    assert "perplexity" in capfd.readouterr().out


@pytest.mark.slow
def test_llm_stops_at_eos_and_at_the_sequence_limit(meta):
    import qnnrt
    from qnnrt.llm import ContextLengthError, LlmRunner
    g = meta["greedy_tokens"]
    with qnnrt.load(FIX / "model.pte") as prog:
        r = LlmRunner(prog)
        res = r.generate(meta["prompt"], 10, eos_ids=[g[2]])
        assert res.tokens == g[:3] and res.stop_reason == "eos"
        res = r.generate(meta["prompt"], 10, seq_len=len(meta["prompt"]) + 2)
        assert res.tokens == g[:2] and res.stop_reason == "context"
        with pytest.raises(ContextLengthError, match="exceeds what the prompt processor"):
            r.generate(list(range(97)), 1)


@pytest.mark.slow
def test_llm_context_length_message(capfd):
    assert main(["llm", str(FIX / "model.pte"), "--prompt-tokens", ",".join(["5"] * 100)]) == 1
    err = capfd.readouterr().err
    assert "96 tokens" in err and "context 128" in err


@pytest.mark.slow
def test_llm_prompt_longer_than_one_window_is_chunked(meta):
    """40 prompt ids: two prefill calls; the continuation equals a one-call prefill of the last
    32 tokens' context only if chunking is wrong, so compare with score mode's logits instead."""
    import qnnrt
    from qnnrt.llm import LlmRunner
    prompt = meta["prompt"] + meta["greedy_tokens"] + [7, 9]
    with qnnrt.load(FIX / "model.pte") as prog:
        r = LlmRunner(prog)
        res = r.generate(prompt, 2, keep_logits=True)
        assert res.prefill_calls == 2
        sc = r.score(prompt + [res.tokens[0]], n_prefill=32)  # 32 by prefill, the rest by decode
    np.testing.assert_allclose(res.logits[0], sc.logits[-1], atol=TOL)
    assert res.tokens[0] == int(np.argmax(sc.logits[-1]))


def test_llm_tokenizer_missing_is_a_clear_error(tmp_path):
    """Through the CLI, in a Python where `tokenizers` does not import (a stand-in package first on
    the path that raises ImportError, as a missing one does): one line naming the install command."""
    blocked = tmp_path / "blocked" / "tokenizers"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError(\"No module named 'tokenizers'\")\n")
    (tmp_path / "tok.json").write_text("{}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocked.parent), ROOT]))
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", "llm", str(FIX / "model.pte"), "--prompt", "hi",
                        "--tokenizer", str(tmp_path / "tok.json"), "--quiet"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 1, r.stderr
    assert "needs the `tokenizers` package" in r.stderr and INSTALL_HINT in r.stderr
    assert "Traceback" not in r.stderr


def test_weight_shared_binary_refused_with_the_cause(capfd, monkeypatch):
    path = WEIGHT_SHARED_BIN
    from qnnrt.core import ContextBinary
    with ContextBinary(path) as b:
        assert b.info.weight_sharing
        assert all(g.blob_info["v2_version"] == 2 and g.blob_info["sharedWeightsSize"] > 0
                   and g.blob_info["size"] == 112 for g in b.graphs)
    monkeypatch.setenv("QNNRT_NO_FORK", "1")  # in-process: refused before QNN could crash
    assert main(["run", str(path)]) == 1
    err = capfd.readouterr().err
    assert "weight sharing" in err and "x86 simulator" in err and "export with the x86 settings" in err
    assert main(["inspect", str(path)]) == 0
    assert "HTP weight sharing: yes" in capfd.readouterr().out
    assert os.environ["QNNRT_NO_FORK"] == "1"


def test_fixture_binary_has_no_weight_sharing():
    from qnnrt.core import ContextBinary
    from qnnrt.executorch.reader import qnn_context_binary, read_pte
    with read_pte(FIX / "model.pte") as p:
        d = p.methods["kv_forward"].delegates[0]
        b = ContextBinary(buffer=qnn_context_binary(d), name="fixture")
        assert not b.info.weight_sharing
        assert all(g.blob_info["constSize"] > 0 for g in b.graphs)
        b.close()
