"""Bundles made as AI Hub makes them (tools/fixtures/make_genie_bundle.py --aihub: the mask clipped at -50,
the cache columns it closes not zeroed by the graphs), float and w8a16 (uint16 activations, uint8 KV):
qnnrt gives libGenie.so's greedy tokens over 4 prompts x 24 tokens (references.json ``genie_tokens``,
recorded by the maker's --genie run); Genie is run live on one prompt, and its own RoPE tables (dumped
by its ``debug`` block) equal qnnrt's to the code."""
from __future__ import annotations

import json

import numpy as np
import pytest

import qnnrt
from qnnrt.llm.runner import LlmRunner
from tests.genie.conftest import copy_bundle
from tests.helpers.data import GENIE_AIHUB_F32, GENIE_AIHUB_W8A16
from tests.helpers.genie_bundle import Bundle, run_genie


@pytest.mark.parametrize("root", [GENIE_AIHUB_F32, GENIE_AIHUB_W8A16], ids=["f32", "w8a16"])
def test_qnnrt_gives_genies_greedy_tokens(root) -> None:
    refs = Bundle.load(root).meta["references"]
    assert len(refs) == 4 and all(len(r["genie_tokens"]) == 24 for r in refs)
    with qnnrt.load(root) as p:
        runner = LlmRunner(p)
        got = [runner.generate(r["prompt_ids"], 24, eos_ids=()).tokens for r in refs]
    assert got == [r["genie_tokens"] for r in refs]
    if root == GENIE_AIHUB_W8A16:   # the quantized model's tokens are not the float model's: the test tells
        assert got[0] != refs[0]["tokens"]


def test_a_new_quantized_cache_reads_zero_as_genie_clears_it() -> None:
    """Never-written slots hold each cache's zero point (0.0), after a reset too; graphs that do not
    zero the columns the mask closes read them (byte 0 there left Genie's tokens at the 4th token)."""
    with qnnrt.load(GENIE_AIHUB_W8A16) as p:
        runner = LlmRunner(p, create_contexts=False)
        lay = runner.layout
        cache = runner.new_cache()
        zk, zv = lay.k_quant[0].zero_point, lay.v_quant[0].zero_point
        assert zk == zv == 128 and (cache.k[0] == zk).all() and (cache.v[3] == zv).all()
        cache.k[0][..., :5] = 7
        cache.written, cache.n_past = 5, 5
        cache.reset()
        assert (cache.k[0] == zk).all() and cache.n_past == 0


def test_genie_live_gives_the_recorded_tokens(genie_library) -> None:
    """The committed genie_tokens are what libGenie.so gives now (the prompt without its BOS: Genie adds it)."""
    r = Bundle.load(GENIE_AIHUB_W8A16).meta["references"][0]
    done = run_genie(GENIE_AIHUB_W8A16, "--prompt-tokens", ",".join(map(str, r["prompt_ids"][1:])),
                     "--max-new-tokens", "24")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["tokens"] == r["genie_tokens"]


def test_genies_rope_tables_are_qnnrts(genie_library, tmp_path) -> None:
    """Genie quantizes its cos / sin tables by flooring (value / scale + zero point); its dump of the
    whole table (128 positions x 8) equals qnnrt's code for code (rounding differs in ~half of them)."""
    b = copy_bundle(GENIE_AIHUB_W8A16, tmp_path / "bundle")
    dump = tmp_path / "dump"
    cfg = json.loads((b / "genie_config.json").read_text())
    cfg["dialog"]["debug"] = {"path": str(dump), "dump-tensors": True, "dump-start": 0, "dump-end": 0}
    (b / "genie_config.json").write_text(json.dumps(cfg))
    done = run_genie(b, "--prompt-tokens", "85,73", "--max-new-tokens", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    with qnnrt.load(GENIE_AIHUB_W8A16) as p:
        rope = LlmRunner(p, create_contexts=False, prepared=False).layout.rope
    assert rope is not None
    for name, table in (("cos", rope.cos), ("sin", rope.sin)):
        genie = np.fromfile(next(dump.rglob(f"position_ids_{name}.u16.dat")), np.uint16).reshape(table.shape)
        assert np.array_equal(genie, table), name
