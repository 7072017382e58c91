"""A quantized ExecuTorch Qualcomm LLM .pte (uint16 atten_mask / logits, uint8 k/v caches, encodings in
the constant methods) runs through `LlmRunner` / `qnnrt llm` with its I/O quantized and dequantized
correctly, on the real x86 HTP simulator. The model is tests/helpers/llm_pte.TinyLlm (2 layers, 1 kv
head, head dim 8, vocab 32, context 16, prefill window 4); its float numpy twin is the reference."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from qnnrt import load
from qnnrt.cli.main import main
from qnnrt.llm.kv_cache import KVCache
from qnnrt.llm.runner import LlmRunner
from qnnrt.llm.quant import QuantParams
from tests.helpers.llm_pte import C, D, EOS_ID, H, L, T_PREFILL, V, TinyLlm, write_pte

SEED = 7
PROMPT = [30, 20, 22, 28, 19, 25]     # two prefill calls (4 + 2); greedy margins >= 0.66 in float
N_NEW = 10                            # fills the context: positions 6..15
FP16_TOL = 0.15                       # |qnnrt - quantized numpy twin| on the logits (fp16 graph inside)


@pytest.fixture(scope="module")
def model() -> TinyLlm:
    return TinyLlm(seed=SEED)


@pytest.fixture(scope="module")
def binaries(model, tmp_path_factory) -> dict:
    return model.binaries(tmp_path_factory.mktemp("tiny_llm"))


@pytest.fixture(scope="module")
def pte(model, binaries, tmp_path_factory):
    return write_pte(model, binaries, tmp_path_factory.mktemp("qpte") / "model_q.pte")


@pytest.fixture(scope="module")
def prog(pte):
    with load(str(pte)) as p:
        yield p


@pytest.fixture(scope="module")
def reference(model):
    return model.reference(PROMPT, N_NEW)


def _pte_with(model, binaries, tmp_path, **constants):
    return load(str(write_pte(model, binaries, tmp_path / "variant.pte", constants=constants)))


def test_method_boundary_is_quantized_as_executorch_writes_it(prog, model):
    for name, T in (("prefill_forward", T_PREFILL), ("kv_forward", 1)):
        m = prog.methods[name]
        want_in = [(np.int32, (1, T)), (np.uint16, (1, 1, T, C)), (np.int32, (1, T))]
        want_in += [(np.uint8, (1, H, D, C - T))] * L + [(np.uint8, (1, H, C - T, D))] * L
        want_out = [(np.uint16, (1, T, V))] + [(np.uint8, (1, H, D, T))] * L + [(np.uint8, (1, H, T, D))] * L
        assert [(s.dtype, s.shape) for s in m.inputs] == [(np.dtype(d), s) for d, s in want_in]
        assert [(s.dtype, s.shape) for s in m.outputs] == [(np.dtype(d), s) for d, s in want_out]
    lay = LlmRunner(prog).layout
    assert (lay.mode, lay.n_layers, lay.context_len, lay.vocab_size) == ("hybrid", L, C, V)
    assert lay.cache_dtype == np.uint8 and lay.logits_dtype == np.uint16
    assert lay.decode.mask_open == 65535 and lay.decode.mask_closed == 0
    assert lay.logits_quant == QuantParams(model.logits_enc.scale, model.logits_enc.zero_point, np.uint16)
    # get_kv_output_<i>_quant_attr: i = k_0..k_{L-1}, then v_0..v_{L-1}; every encoding differs
    for got, enc in zip(lay.k_quant + lay.v_quant, model.k_enc + model.v_enc):
        assert got == QuantParams(enc.scale, enc.zero_point, np.uint8, 0, 255)
    assert len({(e.scale, e.zero_point) for e in model.k_enc + model.v_enc}) == 2 * L


def test_generate_matches_float_reference(prog, model, reference):
    ref_tokens, ref_rows, _ = reference
    qtokens, qrows, _ = model.reference(PROMPT, N_NEW, quantized=True)
    assert qtokens == ref_tokens and len(set(ref_tokens)) >= 5 and EOS_ID not in ref_tokens
    res = LlmRunner(prog).generate(PROMPT, N_NEW, eos_ids=[], keep_logits=True)
    assert res.tokens == ref_tokens
    assert res.prefill_calls == 2 and res.stop_reason == "max_new_tokens"
    for got, q, f in zip(res.logits, qrows, ref_rows):
        # dequantized through get_logits_scale / _zero_point: the twin with the same boundary
        # quantization agrees to fp16 noise; the float model within the uint8 caches' noise
        assert float(np.abs(got - q).max()) <= FP16_TOL
        assert float(np.abs(got - f).max()) <= 0.5
        assert int(np.argmax(got)) == int(np.argmax(f))


def test_wrong_mask_convention_changes_the_output(prog, reference):
    """The mask must be uint16 65535 (open) / 0: with 255 as 'open' (the uint8 convention) the
    same program no longer reproduces the reference, so the test above checks the mask."""
    runner = LlmRunner(prog)
    lay = runner.layout
    bad = dataclasses.replace(lay, prefill=dataclasses.replace(lay.prefill, mask_open=255.0),
                              decode=dataclasses.replace(lay.decode, mask_open=255.0))
    res = LlmRunner(prog, bad).generate(PROMPT, N_NEW, eos_ids=[], keep_logits=True)
    good = runner.generate(PROMPT, N_NEW, eos_ids=[], keep_logits=True)
    assert res.tokens != reference[0] or max(float(np.abs(a - b).max())
                                             for a, b in zip(res.logits, good.logits)) > 1.0


def test_mask_values_and_raw_uint8_caches(prog, model, reference):
    runner = LlmRunner(prog)
    lay = runner.layout
    calls: list[tuple[str, dict, dict]] = []

    def run(method, inputs):
        out = runner.run(method, inputs)
        calls.append((method, {k: v.copy() for k, v in inputs.items()}, out))
        return out

    from qnnrt.llm.loops import generate
    cache = KVCache(lay)
    res = generate(run, lay, PROMPT, N_NEW, eos_ids=[], cache=cache)
    assert res.tokens == reference[0]
    assert [c[0] for c in calls] == ["prefill_forward"] * 2 + ["kv_forward"] * (N_NEW - 1)
    n_past, raw_k, raw_v = 0, [[] for _ in range(L)], [[] for _ in range(L)]
    for method, ins, out in calls:
        m = lay.method(method)
        T = m.ar_len
        names = m.input_names
        mask = ins[names[1]]
        assert mask.dtype == np.uint16 and set(np.unique(mask).tolist()) <= {0, 65535}
        want = np.zeros((T, C), np.uint16)
        want[:, :n_past] = 65535
        want[:, C - T:] = np.where(np.tril(np.ones((T, T), bool)), 65535, 0)
        np.testing.assert_array_equal(mask[0, 0], want)
        for l in range(L):
            k_in, v_in = ins[names[3 + l]], ins[names[3 + L + l]]
            assert k_in.dtype == np.uint8 and v_in.dtype == np.uint8
            # the cache inputs hold exactly the raw uint8 entries earlier calls returned
            if n_past:
                np.testing.assert_array_equal(k_in[..., :n_past], np.concatenate(raw_k[l], axis=-1))
                np.testing.assert_array_equal(v_in[:, :, :n_past], np.concatenate(raw_v[l], axis=2))
        n = min(T, len(PROMPT) - n_past) if method == "prefill_forward" else 1
        outs = [out[nm] for nm in m.output_names]
        for l in range(L):
            raw_k[l].append(outs[1 + l][..., :n])
            raw_v[l].append(outs[1 + L + l][:, :, :n])
        n_past += n
    assert cache.n_past == n_past == len(PROMPT) + N_NEW - 1
    for l in range(L):
        assert cache.k[l].dtype == np.uint8 and cache.v[l].dtype == np.uint8
        np.testing.assert_array_equal(cache.k[l][..., :n_past], np.concatenate(raw_k[l], axis=-1))
        np.testing.assert_array_equal(cache.v[l][:, :, :n_past], np.concatenate(raw_v[l], axis=2))
    # dequantized through get_kv_output_<i>_quant_attr: the float model's k / v within one step + fp16
    _, _, (kc, vc) = reference
    ks, vs = cache.dequantized()
    for l in range(L):
        assert float(np.abs(ks[l][0, 0].T - kc[l][:n_past]).max()) <= model.k_enc[l].scale + 0.02
        assert float(np.abs(vs[l][0, 0] - vc[l][:n_past]).max()) <= model.v_enc[l].scale + 0.02
    # ... and with the attrs in another order (k_0, v_0, k_1, v_1) they are not
    wrong = dataclasses.replace(lay, k_quant=(lay.k_quant[0], lay.v_quant[0]),
                                v_quant=(lay.k_quant[1], lay.v_quant[1]))
    bad = KVCache(wrong)
    bad.k, bad.v, bad.n_past = cache.k, cache.v, cache.n_past
    ks, _ = bad.dequantized()
    assert float(np.abs(ks[1][0, 0].T - kc[1][:n_past]).max()) > 0.5


def test_misread_logits_encoding_is_detected(model, binaries, reference, tmp_path):
    """The logits bound is tight enough to see a wrong zero point; score mode sees a wrong scale."""
    _, qrows, _ = model.reference(PROMPT, N_NEW, quantized=True)
    enc = model.logits_enc
    p = _pte_with(model, binaries, tmp_path, get_logits_zero_point=enc.zero_point + 1000)
    res = LlmRunner(p).generate(PROMPT, N_NEW, eos_ids=[], keep_logits=True)
    assert res.tokens == reference[0]                 # argmax does not see a zero point...
    assert float(np.abs(res.logits[0] - qrows[0]).max()) > FP16_TOL   # ...the dequantized logits do
    toks = PROMPT + reference[0][:6]
    ref_lp = np.array(model.score_logprobs(toks, len(PROMPT)))
    good = LlmRunner(load(str(write_pte(model, binaries, tmp_path / "good.pte")))).score(toks, n_prefill=len(PROMPT))
    assert float(np.abs(np.array(good.logprobs) - ref_lp).max()) <= 0.1
    p2 = _pte_with(model, binaries, tmp_path, get_logits_scale=enc.scale * 2)
    bad = LlmRunner(p2).score(toks, n_prefill=len(PROMPT))
    assert float(np.abs(np.array(bad.logprobs) - ref_lp).max()) > 0.1


def test_cli_generate_and_score(pte, model, reference, tmp_path, capfd, monkeypatch):
    # in-process: this module's programs have started the HTP simulator's threads, and a child forked
    # from such a process (what `main` does by default) spins forever inside QNN's graph execute
    monkeypatch.setenv("QNNRT_NO_FORK", "1")
    rep = tmp_path / "gen.json"
    assert main(["llm", str(pte), "--prompt-tokens", ",".join(map(str, PROMPT)), "--max-new-tokens",
                 str(N_NEW), "--ignore-eos", "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert r["generated_tokens"] == reference[0]
    assert r["layout"]["cache_dtype"] == "uint8" and r["layout"]["logits_dtype"] == "uint16"
    assert {"ttft_s", "prefill_tokens_per_s", "decode_tokens_per_s", "decode_ms"} <= set(r)
    toks = PROMPT + reference[0][:8]
    rep2 = tmp_path / "score.json"
    assert main(["llm", str(pte), "--score-tokens", ",".join(map(str, toks)), "--dump-logits",
                 str(tmp_path / "dump"), "--report", str(rep2)]) == 0
    s = json.loads(rep2.read_text())["score"]
    n_pre = s["n_prefill"]
    ref_lp = np.array(model.score_logprobs(toks, n_pre))
    assert len(s["logprobs"]) == len(toks) - 1
    np.testing.assert_allclose(s["logprobs"], ref_lp, atol=0.1)
    assert s["perplexity"] == pytest.approx(float(np.exp(-ref_lp.mean())), rel=0.05)
    rows = np.load(tmp_path / "dump" / "logits.npy")
    assert rows.dtype == np.float32 and rows.shape == (len(toks) - 1, V)
    assert "perplexity" in capfd.readouterr().out


def test_stops_at_the_eos_the_constant_method_gives(model, binaries, reference, tmp_path):
    eos = reference[0][3]                      # the 4th greedy token (first seen there)
    assert eos not in reference[0][:3]
    res = LlmRunner(_pte_with(model, binaries, tmp_path, get_eos_id=eos)).generate(PROMPT, N_NEW)
    assert res.tokens == reference[0][:4] and res.stop_reason == "eos"


def test_quantized_logits_without_their_encoding_are_refused(model, binaries, tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("QNNRT_NO_FORK", "1")   # see test_cli_generate_and_score
    pte = write_pte(model, binaries, tmp_path / "noenc.pte", constants={"get_logits_scale": None})
    assert main(["llm", str(pte), "--prompt-tokens", "3,4"]) == 1
    err = capfd.readouterr().err
    assert "uint16" in err and "get_logits_scale" in err


def test_cache_path_does_not_go_through_the_kv_attrs(model, binaries, reference, tmp_path):
    """Caches are copied raw: kv attrs with every zero point off by 50 leave the tokens and the
    logits as they were (a runner that requantized through them would change both), and only the
    dequantized view of the cache moves."""
    bad = {f"get_kv_output_{i}_quant_attr": [e.scale, e.zero_point + 50, 0, 255, "torch.uint8"]
           for i, e in enumerate(model.k_enc + model.v_enc)}
    prog = _pte_with(model, binaries, tmp_path, **bad)
    cache = KVCache(LlmRunner(prog).layout)
    res = LlmRunner(prog).generate(PROMPT, N_NEW, eos_ids=[], keep_logits=True, cache=cache)
    assert res.tokens == reference[0]
    _, qrows, _ = model.reference(PROMPT, N_NEW, quantized=True)
    assert max(float(np.abs(a - b).max()) for a, b in zip(res.logits, qrows)) <= FP16_TOL
    ks, _ = cache.dequantized()
    kc = reference[2][0]
    assert float(np.abs(ks[0][0, 0].T - kc[0][:cache.n_past]).max()) > 40 * model.k_enc[0].scale
