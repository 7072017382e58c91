"""LoRA adapters per request (issue 48), as users run them: the tiny Llama converted by the CLI with
LoRA inputs (--lora-rank 4, all seven projections), two PEFT adapters of make_lora_adapters.py
(terse: r 4, q/v, F32; wordy: r 2 zero-padded to 4, rslora, all projections, BF16), then
`qnnrt llm --lora ... --adapter` and `qnnrt serve --lora ...` switched per request through the
official openai client: every generation equals the float reference of the merged weights
(W + scale * B A; none: the base model's), tests/data/lora/references.json."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.convert.conftest import safe_prefix
from tests.helpers.cli_helpers import qnnrt
from tests.helpers.data import DATA
from tests.helpers.genie_bundle import fixture_module

REFS = json.loads((DATA / "lora" / "references.json").read_text())
ADAPTERS = ("terse", "wordy")


@pytest.fixture(scope="module")
def adapters(models, tmp_path_factory) -> dict[str, Path]:
    return fixture_module("make_lora_adapters").make(models["llama"], tmp_path_factory.mktemp("adapters"))


@pytest.fixture(scope="module")
def bundle(models, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lora") / "bundle"
    r = qnnrt("convert", models["llama"], "-o", out, "--context", "128", "--prompt-ar", "16", "--parts", "2",
              "--lora-rank", str(REFS["bundle_rank"]), "--lora-targets", REFS["bundle_targets"], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def _lora_args(adapters: dict[str, Path]) -> tuple[str, ...]:
    return ("--lora", ",".join(f"{n}={p}" for n, p in adapters.items()))


def _generated(stdout: str) -> list[int]:
    line = next(x for x in stdout.splitlines() if x.strip().startswith("generated:"))
    return [int(t) for t in line.split(":", 1)[1].split()]


def test_the_record_names_the_lora_inputs(bundle) -> None:
    rec = json.loads((bundle / "qnnrt_convert.json").read_text())
    lora = rec["lora"]
    assert lora["rank"] == 4 and lora["layers"] == 3 and lora["scale_input"] == "lora_scale"
    assert lora["targets"] == REFS["bundle_targets"].split(",")
    assert lora["dims"]["q_proj"] == [64, 64] and lora["dims"]["k_proj"] == [64, 32]
    assert lora["dims"]["down_proj"] == [128, 64]
    assert rec["options"]["lora_rank"] == 4
    r = qnnrt("inspect", bundle)           # the layout takes the LoRA inputs as the adapters'
    assert r.returncode == 0 and "LLM layout: hybrid" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert "LoRA inputs: rank 4 on q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj of 3 layers" in r.stdout


@pytest.mark.parametrize("name", ["base", *ADAPTERS])
def test_qnnrt_llm_gives_the_merged_reference(bundle, adapters, name) -> None:
    """The longer-margin prompt of each: the tokens of the merged float model (none: the base's)."""
    ref = max(REFS["adapters"][name], key=safe_prefix)
    n = safe_prefix(ref)
    assert n >= 8
    pick = () if name == "base" else ("--adapter", name)
    r = qnnrt("llm", bundle, *_lora_args(adapters), *pick, "--prompt-tokens", ",".join(map(str, ref["prompt_ids"])),
              "--max-new-tokens", str(len(ref["tokens"])))
    assert r.returncode == 0, r.stderr[-3000:]
    assert _generated(r.stdout)[:n] == ref["tokens"][:n]
    assert (f"LoRA adapter: {name}" in r.stdout) == (name != "base")


def test_adapters_differ_from_the_base(bundle) -> None:
    """The references the tests judge by are not the base's tokens again (the adapters change the model)."""
    base = [r["tokens"][:4] for r in REFS["adapters"]["base"]]
    for name in ADAPTERS:
        assert all(a["tokens"][:4] != b for a, b in zip(REFS["adapters"][name], base)), name


def test_bad_lora_arguments_are_clear(bundle, adapters, models, tmp_path) -> None:
    cases = [
        (("--lora", f"terse={adapters['terse']}", "--adapter", "wordy"), "--adapter wordy: not among the --lora"),
        (("--lora", "terse"), "give NAME=DIR"),
        (("--lora", f"x={tmp_path / 'none'}"), "no such folder"),
    ]
    for extra, message in cases:
        r = qnnrt("llm", bundle, *extra, "--prompt-tokens", "0,5")
        assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr, (extra, r.stderr[-800:])
    big = tmp_path / "big"
    big.mkdir()
    cfg = json.loads((adapters["terse"] / "adapter_config.json").read_text()) | {"r": 8}
    (big / "adapter_config.json").write_text(json.dumps(cfg))
    r = qnnrt("llm", bundle, "--lora", f"big={big}", "--prompt-tokens", "0,5")
    assert r.returncode == 1 and "--lora big:" in r.stderr and "--lora-rank 8" in r.stderr, r.stderr[-800:]


def test_serve_switches_adapters_per_request(bundle, adapters, tmp_path) -> None:
    """One `qnnrt serve` with two adapters: /v1/models lists the base and each adapter (its own name,
    parent the base, as vLLM); requests alternate base / terse / wordy on the same prompt, each equal to
    its merged reference; the KV cache is reused only under the adapter that wrote it."""
    openai = pytest.importorskip("openai")
    from tests.serve.conftest import start_server
    server = start_server(bundle, tmp_path / "report.json", *_lora_args(adapters), model=bundle, model_id="tiny")
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
        cards = {m.id: m for m in client.models.list().data}
        assert list(cards) == ["tiny", "terse", "wordy"]
        assert cards["terse"].model_extra["parent"] == "tiny"
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(bundle / "tokenizer.json"))
        order = ["tiny", "terse", "wordy", "terse", "tiny", "wordy"]
        cached = []
        for model in order:
            ref = REFS["adapters"]["base" if model == "tiny" else model][0]
            n = safe_prefix(ref)
            out = client.completions.create(model=model, prompt=ref["prompt_ids"], max_tokens=n, temperature=0)
            assert out.model == model
            assert out.choices[0].text == tok.decode(ref["tokens"][:n]), model
            cached.append(out.usage.prompt_tokens_details.cached_tokens if out.usage.prompt_tokens_details else 0)
        # the same prompt each time: the first request of each adapter prefills it all, a later one of the
        # same adapter reuses its own cache, whatever ran in between
        assert cached[:3] == [0, 0, 0] and all(c > 0 for c in cached[3:]), cached
        with pytest.raises(openai.NotFoundError) as e:
            client.completions.create(model="nope", prompt=[0, 5], max_tokens=2)
        assert "serves 'tiny', 'terse', 'wordy'" in str(e.value)
        chat = client.chat.completions.create(model="wordy", messages=[{"role": "user", "content": "the robot"}],
                                              max_tokens=3, temperature=0)
        assert chat.model == "wordy" and chat.choices[0].message.content is not None
    finally:
        assert server.stop() == 143, server.stderr()[-2000:]     # 128 + SIGTERM


def test_chat_switches_adapter_with_its_own_cache(bundle, adapters, tmp_path) -> None:
    """`qnnrt llm --chat`: '/adapter NAME' switches; the same message under each adapter prefills it
    all (no entries of another adapter reused), a later turn of the same adapter reuses its prefix."""
    import os
    import subprocess
    import sys

    from tests.helpers.cli_helpers import ROOT
    report = tmp_path / "chat.json"
    lines = "the robot\n/adapter terse\nthe robot\n/adapter\nthe robot\n/adapter nope\n"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", "llm", str(bundle), "--chat", "--tokenizer", str(bundle),
                        *_lora_args(adapters), "--max-new-tokens", "4", "--report", str(report)],
                       input=lines, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "[adapter: terse; a new conversation]" in r.stderr and "no adapter 'nope'" in r.stderr
    turns = json.loads(report.read_text())["turns"]
    assert [t["cached_tokens"] for t in turns][:2] == [0, 0] and turns[2]["cached_tokens"] > 0, turns


def test_lora_on_a_bundle_without_lora_inputs(models, adapters, tmp_path) -> None:
    plain = tmp_path / "plain"
    r = qnnrt("convert", models["llama"], "-o", plain, "--context", "128", "--prompt-ar", "16", "--parts", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    r = qnnrt("llm", plain, "--lora", f"terse={adapters['terse']}", "--prompt-tokens", "0,5")
    assert r.returncode == 1 and "takes no LoRA adapters" in r.stderr and "--lora-rank" in r.stderr, r.stderr[-800:]


def test_adapters_under_multi_pd(bundle, adapters) -> None:
    """Under multi-PD the adapters' arrays live in the shared arena the PD workers read in place."""
    ref = REFS["adapters"]["terse"][1]
    n = safe_prefix(ref)
    r = qnnrt("llm", bundle, *_lora_args(adapters), "--adapter", "terse", "--residency", "multi-pd:2",
              "--prompt-tokens", ",".join(map(str, ref["prompt_ids"])), "--max-new-tokens", str(n))
    assert r.returncode == 0, r.stderr[-3000:]
    assert _generated(r.stdout)[:n] == ref["tokens"][:n]
