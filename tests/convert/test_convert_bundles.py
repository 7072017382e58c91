"""`qnnrt convert` end to end, as users run it (the CLI in a subprocess, no terminal): each tiny
model (Llama HF sharded + llama3 RoPE, Qwen2 bf16 with biases, Qwen3 with q/k norm, the Llama GGUF)
converted to a Genie bundle at fp16, then run by `qnnrt llm` and by Qualcomm's libGenie.so
(tools/genie_reference.py) on the HTP simulator: both give the numpy reference's greedy tokens
wherever its top-2 margin is above fp16's noise. Compiles are cached (the part cache)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.convert.conftest import safe_prefix
from tests.helpers.cli_helpers import qnnrt
from tests.helpers.genie_bundle import GENIE_RUNNER

CONVERT = ("--context", "128", "--prompt-ar", "16")
PARTS = {"llama": "2", "qwen2": "auto", "qwen3": "1", "gguf": "2"}


@pytest.fixture(scope="module")
def bundles(models, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bundles")
    out = {}
    for name, path in models.items():
        r = qnnrt("convert", path, "-o", root / name, *CONVERT, "--parts", PARTS[name], timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "convert: part 1/" in r.stderr and "% done" in r.stderr     # progress lines without a terminal
        out[name] = root / name
    return out


def _generated(stdout: str) -> list[int]:
    line = next(x for x in stdout.splitlines() if x.strip().startswith("generated:"))
    return [int(t) for t in line.split(":", 1)[1].split()]


@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3", "gguf"])
def test_qnnrt_llm_gives_the_reference_tokens(bundles, references, name) -> None:
    refs = references["models"][name]
    assert max(safe_prefix(ref) for ref in refs) >= 8, name      # the test compares something
    for ref in refs:
        r = qnnrt("llm", bundles[name], "--prompt-tokens", ",".join(map(str, ref["prompt_ids"])),
                  "--max-new-tokens", str(len(ref["tokens"])))
        assert r.returncode == 0, r.stderr[-3000:]
        n = safe_prefix(ref)
        assert _generated(r.stdout)[:n] == ref["tokens"][:n], (name, ref["prompt"])


@pytest.fixture(scope="module")
def genie_library() -> None:
    import onnxruntime_qnn
    if not (Path(onnxruntime_qnn.__file__).parent / "libGenie.so").is_file():
        pytest.skip("libGenie.so is not in this onnxruntime-qnn wheel")


@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3", "gguf"])
def test_libgenie_gives_the_reference_tokens(bundles, references, genie_library, name) -> None:
    """Genie prepends the config's bos-token itself; greedy by the sampler converted from
    generation_config.json (do_sample absent: top-k 1)."""
    ref = max(references["models"][name], key=safe_prefix)
    cfg = json.loads((bundles[name] / "genie_config.json").read_text())["dialog"]
    assert cfg["context"]["bos-token"] == ref["prompt_ids"][0] and cfg["sampler"]["top-k"] == 1
    done = subprocess.run([sys.executable, str(GENIE_RUNNER), str(bundles[name]), "--prompt-tokens",
                           ",".join(map(str, ref["prompt_ids"][1:])), "--max-new-tokens", str(len(ref["tokens"])),
                           "--json"], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    n = safe_prefix(ref)
    assert json.loads(done.stdout)["tokens"][:n] == ref["tokens"][:n]


def test_the_bundle_says_what_it_is(bundles, models) -> None:
    """The record names the source's hash, the options and the versions; the simulator's bundle is not
    weight-shared and says why; the chat template and the tokenizer's config are in the bundle."""
    rec = json.loads((bundles["llama"] / "qnnrt_convert.json").read_text())
    assert rec["architecture"] == "LlamaForCausalLM" and rec["parts"] == [[0, 2], [2, 3]]
    assert len(rec["source"]["sha256"]) == 64 and rec["options"]["precision"] == "fp16"
    assert {"onnxruntime", "qnnrt"} <= set(rec["versions"])
    assert rec["weight_sharing"] == {"enabled": False, "why": "off: the x86 HTP simulator cannot load "
                                                              "weight-shared binaries (auto)"}
    ext = json.loads((bundles["llama"] / "htp_backend_ext_config.json").read_text())
    assert ext["context"]["weight_sharing_enabled"] is False
    pe = json.loads((bundles["llama"] / "genie_config.json").read_text())["dialog"]["engine"]["model"][
        "positional-encoding"]
    assert pe["rope-scaling"]["rope-type"] == "llama3" and pe["rope-dim"] == 8
    assert (bundles["qwen3"] / "chat_template.jinja").read_text().startswith("{% for m in messages %}")
    assert json.loads((bundles["gguf"] / "qnnrt_convert.json").read_text())["source"]["kind"] == "gguf"


def test_a_repeat_resumes_from_the_part_cache_and_replaces_atomically(bundles, models, tmp_path) -> None:
    out = tmp_path / "again"
    r = qnnrt("convert", models["llama"], "-o", out, *CONVERT, "--parts", "2")
    assert r.returncode == 0 and "2 part(s), 2 from the cache" in r.stdout, r.stdout + r.stderr
    assert (out / "llama_part_1_of_2.bin").read_bytes() == (bundles["llama"] / "llama_part_1_of_2.bin").read_bytes()
    r = qnnrt("convert", models["llama"], "-o", out, *CONVERT, "--parts", "2")
    assert r.returncode == 1 and "exists; remove it or pass overwrite=True (--force)" in r.stderr
    r = qnnrt("convert", models["llama"], "-o", out, *CONVERT, "--parts", "2", "--force")
    assert r.returncode == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["again"]


def test_a_failure_half_way_leaves_no_bundle(models, tmp_path, monkeypatch) -> None:
    from qnnrt.convert import ConvertOptions, convert, pipeline
    from qnnrt.errors import BuildError

    def fail(*args, **kwargs):
        raise BuildError("compile failed (injected)")
    monkeypatch.setattr(pipeline, "_part_blob", fail)
    with pytest.raises(BuildError, match="injected"):
        convert(models["qwen3"], tmp_path / "b", ConvertOptions(context=64, prompt_ar=8, parts=2, progress=False,
                                                               cache_dir=tmp_path / "cache"))
    assert list(tmp_path.iterdir()) == [tmp_path / "cache"] or not (tmp_path / "b").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".b.partial")]


def test_w8a16_runs_the_same_on_qnnrt_and_libgenie(models, references, genie_library, tmp_path) -> None:
    """w8a16 (uint16 activations, uint8 KV with their encodings in the binary): qnnrt's greedy tokens
    are Genie's on the same bundle, and the first ones the float reference's (the tiny random model's
    margins are narrow for 8-bit weights later on: docs/convert.md)."""
    from qnnrt.core.binary import ContextBinary
    out = tmp_path / "w8"
    r = qnnrt("convert", models["llama"], "-o", out, *CONVERT, "--precision", "w8a16", "--parts", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    with ContextBinary(out / "llama_part_1_of_1.bin") as b:
        dtypes = {t.name: str(t.dtype) for g in b.graphs for t in g.inputs + g.outputs}
    assert dtypes["past_key_0_in"] == "uint8" and dtypes["logits"] == "uint16" and dtypes["input_ids"] == "int32"
    ref = references["models"]["llama"][0]
    r = qnnrt("llm", out, "--prompt-tokens", ",".join(map(str, ref["prompt_ids"])), "--max-new-tokens", "12")
    assert r.returncode == 0, r.stderr[-3000:]
    ours = _generated(r.stdout)
    done = subprocess.run([sys.executable, str(GENIE_RUNNER), str(out), "--prompt-tokens",
                           ",".join(map(str, ref["prompt_ids"][1:])), "--max-new-tokens", "12", "--json"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["tokens"] == ours
    assert ours[:5] == ref["tokens"][:5]


def test_a_prompt_longer_than_the_prompt_graph_continues_the_reference(bundles, references) -> None:
    """Chunked prefill (27 tokens through AR-16 prompt graphs, then the token graph): greedy decoding
    is its own continuation, so the prompt plus the reference's first 8 tokens continues with the rest."""
    ref = references["models"]["llama"][0]
    prompt = ref["prompt_ids"] + ref["tokens"][:8]
    r = qnnrt("llm", bundles["llama"], "--prompt-tokens", ",".join(map(str, prompt)), "--max-new-tokens", "8")
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(prompt) > 16 and _generated(r.stdout) == ref["tokens"][8:16]


def test_serve_chats_with_the_bundle_alone(bundles, models, tmp_path) -> None:
    """`qnnrt serve BUNDLE` with no --tokenizer (the bundle's own tokenizer.json and chat template), asked by
    the official openai client greedily: the reply is the numpy reference's greedy continuation of the
    chat template's prompt, streamed and not, up to the first step whose top-2 margin is under 0.1."""
    openai = pytest.importorskip("openai")
    from tokenizers import Tokenizer

    from qnnrt.convert import open_model, reference
    from tests.serve.conftest import launch
    template = (bundles["llama"] / "chat_template.jinja").read_text()
    assert "add_generation_prompt" in template
    prompt = "<s>user: the little robot</s><s>assistant: "          # what that template writes
    tok = Tokenizer.from_file(str(bundles["llama"] / "tokenizer.json"))
    ids = tok.encode(prompt, add_special_tokens=False).ids
    src = open_model(models["llama"])
    ref = reference.greedy(src.spec, src.weights, ids, 8)
    n = safe_prefix({"margins": ref.margins})
    assert n >= 3, ref.margins                                    # the test compares something
    server = launch(["serve", str(bundles["llama"]), "--port", "0", "--model-name", "tiny", "--report",
                     str(tmp_path / "report.json")], tmp_path / "report.json")
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
        messages = [{"role": "user", "content": "the little robot"}]
        whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=8, temperature=0)
        assert whole.usage.prompt_tokens == len(ids)
        streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=8, temperature=0, stream=True) if c.choices)
        expected = tok.decode(ref.tokens[:n])
        assert whole.choices[0].message.content.startswith(expected), (whole.choices[0].message.content, expected)
        assert streamed == whole.choices[0].message.content
    finally:
        assert server.stop() in (0, 143), server.stderr()[-2000:]


PERPLEXITY_TEXT = ("once upon a time there was a little robot. the robot saw a red fox by the river and they "
                   "sang a happy song over the green tree. it was a big blue day and the sun made the river light.")


def test_perplexity_of_the_bundle_is_the_float_models(bundles, models) -> None:
    """qnnrt.convert.perplexity on a fixed text (97 tokens through the AR-16 prompt graph, six windows
    advancing the KV cache): the fp16 Llama bundle's mean NLL is the numpy reference's within 0.08 nats
    (measured 0.025; this random model's logits span ~100, so fp16 moves each log-prob by up to 0.44),
    and the measure tells models apart: the reference with layer 0's output projection negated, and
    the Qwen3 bundle on the same ids, are each more than 0.5 nats away."""
    import numpy as np
    from qnnrt import load
    from qnnrt.convert import open_model
    from qnnrt.convert.perplexity import of_reference, of_runner
    from qnnrt.llm import LlmRunner
    from qnnrt.llm.text import TextModel, TextTokenizer
    scored = {}
    for name in ("llama", "qwen3"):
        with load(bundles[name]) as prog:
            runner = LlmRunner(prog)
            ids = TextModel.of(TextTokenizer.from_path(bundles["llama"]), runner.layout).prompt_ids(PERPLEXITY_TEXT)
            assert len(ids) - 1 <= runner.layout.prompt_capacity and len(ids) > 5 * runner.layout.prefill.ar_len
            scored[name] = of_runner(runner, ids)
    src = open_model(models["llama"])
    ref = of_reference(src.spec, src.weights, ids)
    assert abs(scored["llama"].nll - ref.nll) < 0.08, (scored["llama"].nll, ref.nll)
    assert abs(scored["llama"].relative_to(ref)) < np.expm1(0.08)
    wrong = {k: np.asarray(src.weights[k]) for k in src.spec.shapes()}
    wrong["l0.wo"] = -wrong["l0.wo"]
    assert abs(of_reference(src.spec, wrong, ids).nll - scored["llama"].nll) > 0.5
    assert abs(scored["qwen3"].nll - ref.nll) > 0.5


def test_w4a16_is_the_float_model_with_its_4bit_block_weights(models, genie_library, tmp_path) -> None:
    """w4a16 (int4 weights in blocks of 32 input channels: QNN's block quantization, compiled for and run
    on the v73 simulator; the lm head int8): the bundle's NLL on the fixed text is the float reference's
    with the same weights (weights4.block_quantize) within 0.1 nats (measured 0.003), far from the unquantized model's
    (0.66 here: 4 bits are coarse for this random model); libGenie gives qnnrt's tokens."""
    import numpy as np
    from qnnrt import load
    from qnnrt.convert import open_model, weights4
    from qnnrt.convert.perplexity import of_reference, of_runner
    from qnnrt.llm import LlmRunner
    from qnnrt.llm.text import TextModel, TextTokenizer
    out = tmp_path / "w4"
    r = qnnrt("convert", models["llama"], "-o", out, *CONVERT, "--precision", "w4a16", "--parts", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    with load(out) as prog:
        runner = LlmRunner(prog)
        ids = TextModel.of(TextTokenizer.from_path(out), runner.layout).prompt_ids(PERPLEXITY_TEXT)
        bundle = of_runner(runner, ids)
    src = open_model(models["llama"])
    w = {k: np.asarray(src.weights[k], np.float32) for k in src.spec.shapes()}
    w4 = dict(w)
    for k, v in w.items():
        if k == "lm_head":                          # int8 per output channel
            sc = np.abs(v).max(axis=0) / 127
            w4[k] = np.round(v / sc) * sc
        elif v.ndim == 2 and k != "embed":          # the projections; the embedding is a Gather
            q, s = weights4.block_quantize(v)
            w4[k] = q * np.repeat(s, weights4.BLOCK, axis=0)
    assert abs(bundle.nll - of_reference(src.spec, w4, ids).nll) < 0.1
    assert abs(bundle.nll - of_reference(src.spec, w, ids).nll) > 0.3
    prompt = ids[:11]
    r = qnnrt("llm", out, "--prompt-tokens", ",".join(map(str, prompt)), "--max-new-tokens", "8")
    assert r.returncode == 0, r.stderr[-3000:]
    done = subprocess.run([sys.executable, str(GENIE_RUNNER), str(out), "--prompt-tokens",
                           ",".join(map(str, prompt[1:])), "--max-new-tokens", "8", "--json"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["tokens"] == _generated(r.stdout)


def test_fp16_rmsnorm_on_the_htp_survives_massive_activations(tmp_path) -> None:
    """A residual stream of thousands (SmolLM2-135M reaches 24,926 at an attention sink) squares past
    fp16's 65504: the part graph's RMSNorm, compiled for the HTP simulator, must still give the CPU's
    logits with a token whose embedding has channels of ~30,000 (fails when the norm squares x itself,
    or multiplies by 1 / max|x|, which fp16 flushes to zero)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from qnnrt.compiler.compile import CompileOptions, session_options
    from qnnrt.convert import drive, graphs
    from qnnrt.convert.spec import ModelSpec
    spec = ModelSpec("LlamaForCausalLM", vocab=64, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128,
                     eps=1e-5, rope_theta=10000.0, max_positions=64, tied=False)
    rng = np.random.default_rng(5)
    w = {k: (rng.standard_normal(s) / np.sqrt(s[0]) if len(s) == 2 else 1 + 0.1 * rng.standard_normal(s))
         .astype(np.float32) for k, s in spec.shapes().items()}
    w["embed"] = rng.standard_normal((64, 64)).astype(np.float32)
    w["embed"][0, :3] = [30000.0, -28000.0, 25000.0]            # the sink token's massive channels
    plan = graphs.PartPlan(32, graphs.split_layers(2, 1))
    model = graphs.part_model(spec, plan, w, 8, 1)
    feeds = {"input_ids": np.array([[0, 5, 9, 17, 33, 2, 40, 11]], np.int32),
             **drive.step_inputs(spec, 32, drive.Step(8, 0, 8))}
    for i in range(2):
        feeds[f"past_key_{i}_in"] = np.zeros((2, 1, 16, 24), np.float32)
        feeds[f"past_value_{i}_in"] = np.zeros((2, 1, 24, 16), np.float32)
    cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(["logits"], feeds)[0]
    onnx.save(model, tmp_path / "m.onnx")
    htp = ort.InferenceSession(str(tmp_path / "m.onnx"), sess_options=session_options(CompileOptions(), {})) \
        .run(["logits"], feeds)[0]
    assert np.abs(htp - cpu).max() < 0.02 * (cpu.max() - cpu.min())
