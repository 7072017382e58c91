"""The KV cache kept across generations (CachedGenerator) on the LLM fixture: the next turn prefills
only its new tokens and gets the logits a full prefill gets; and `qnnrt llm --chat`, which uses it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers.cli_helpers import ROOT
from tests.helpers.llm_text import text_folder  # noqa: F401
from tests.helpers.data import LLM_STORIES

FIX = LLM_STORIES
TOL = 0.02


class Recorder:
    """A greedy sampler that keeps the logits it saw."""

    def __init__(self):
        self.rows: list[np.ndarray] = []

    def __call__(self, logits: np.ndarray) -> int:
        self.rows.append(np.array(logits, dtype=np.float32))
        return int(np.argmax(logits))


@pytest.mark.slow
def test_next_turn_prefills_only_new_tokens_and_matches_a_full_prefill():
    import qnnrt
    from qnnrt.llm import ContextLengthError, LlmRunner
    from qnnrt.llm.session import CachedGenerator
    meta = json.loads((FIX / "meta.json").read_text())
    p1 = meta["prompt"]                                          # 32 ids: one prefill window
    with qnnrt.load(FIX / "model.pte") as prog:
        gen = CachedGenerator(LlmRunner(prog))
        r1, reused = gen.generate(p1, 3)
        assert reused == 0 and r1.tokens == meta["greedy_tokens"][:3]
        assert gen.tokens == p1 + r1.tokens[:2] and gen.cache.n_past == 34
        p2 = p1 + r1.tokens + [7, 9, 11]                         # the next turn: 38 ids
        warm = Recorder()
        r2, reused = gen.generate(p2, 2, sampler=warm)
        assert reused == 34 and r2.prompt_tokens == p2[34:] and r2.prefill_calls == 1
        cold = Recorder()
        r3, reused = gen.generate(p2, 2, sampler=cold, reuse=False)
        assert reused == 0 and r3.prefill_calls == 2             # 38 tokens: two windows of 32
        assert r2.tokens == r3.tokens
        for a, b in zip(warm.rows, cold.rows):
            np.testing.assert_allclose(a, b, atol=TOL)
        r4, reused = gen.generate(p2, 1)                         # the same prompt again: all but one reused
        assert reused == len(p2) - 1 and r4.prefill_calls == 1 and r4.tokens == r3.tokens[:1]
        with pytest.raises(ContextLengthError):
            gen.generate(p2 + [5] * 80, 1)
        assert gen.tokens == [] and gen.cache.n_past == 0        # a failed call leaves nothing to reuse


@pytest.mark.slow
def test_text_generation_finishes_on_eos_stop_strings_length_and_cancel(text_folder):  # noqa: F811
    import qnnrt
    from qnnrt.llm import LlmRunner
    from qnnrt.llm.session import CachedGenerator
    from qnnrt.llm.text import TextModel, TextTokenizer
    from qnnrt.llm.textgen import generate_text
    meta = json.loads((FIX / "meta.json").read_text())
    g = meta["greedy_tokens"]
    tok = TextTokenizer.from_path(text_folder)
    with qnnrt.load(FIX / "model.pte") as prog:
        gen = CachedGenerator(LlmRunner(prog))
        plain = TextModel.of(tok, gen.runner.layout)
        assert plain.stop_ids == (2,)                                  # get_eos_id and </s> agree
        full = generate_text(gen, plain, meta["prompt"], 4)
        assert full.finish_reason == "length" and full.text == tok.decode(g[:4])
        eos_at_3 = TextModel(tok, plain.bos_id, plain.n_bos, (g[2],), plain.vocab_size)
        chunks: list[tuple[str, int | None]] = []
        r = generate_text(gen, eos_at_3, meta["prompt"], 6, on_text=lambda c, t: chunks.append((c, t)))
        assert r.finish_reason == "stop" and r.result.tokens == g[:3]
        assert [t for _, t in chunks if t is not None] == g[:3] and chunks[2][0] == ""   # EOS adds no text
        text = full.text
        stop = next(text[i:i + 2] for i in range(1, len(text) - 1) if "\ufffd" not in text[i:i + 2])
        r = generate_text(gen, plain, meta["prompt"], 4, stops=[stop])
        assert r.finish_reason == "stop" and r.text == text[:text.index(stop)]
        r = generate_text(gen, plain, meta["prompt"], 6, cancelled=lambda: True)
        assert r.finish_reason == "cancelled" and r.result.tokens == g[:1]   # stops at the first token


@pytest.mark.slow
def test_llm_chat_streams_replies_and_reuses_the_cache(text_folder, tmp_path):  # noqa: F811
    rep = tmp_path / "chat.json"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", "llm", str(FIX / "model.pte"), "--chat", "--tokenizer",
                        str(text_folder), "--system", "Be brief.", "--max-new-tokens", "3", "--report", str(rep)],
                       input="Once upon a time\nThe dog ran\n", capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    turns = json.loads(rep.read_text())["turns"]
    assert len(turns) == 2
    assert turns[0]["cached_tokens"] == 0 and turns[1]["cached_tokens"] >= turns[0]["prompt_tokens"]
    assert all(t["text"] in r.stdout for t in turns if t["text"].strip())
    assert "2 turn(s)" in r.stdout and "prompt tokens reused" in r.stderr
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", "llm", str(FIX / "model.pte"), "--chat"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 1 and "--chat needs --tokenizer" in r.stderr
