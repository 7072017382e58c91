"""Sentence embeddings from an ExecuTorch .pte written the ordinary way (tests/data/embeddings/
tiny_bert): its unnamed inputs mapped by position, its token embeddings pooled as the tokenizer
folder's sentence-transformers modules say; the vectors equal the float32 references."""
from __future__ import annotations

import json

import numpy as np
import pytest

import qnnrt
from qnnrt.llm.embedding import EmbeddingLayout, EmbeddingModel, Pooling
from qnnrt.llm.errors import LayoutError
from tests.helpers.data import TINY_BERT

pytest.importorskip("tokenizers", reason="text needs the `tokenizers` package (pip install -e '.[llm]')")
from qnnrt.llm.text import TextTokenizer

TINY = TINY_BERT


@pytest.fixture(scope="module")
def prog():
    with qnnrt.load(TINY / "model.pte") as p:
        yield p


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_a_pte_without_input_names_embeds_as_the_reference(prog):
    model = EmbeddingModel(prog, TextTokenizer.from_path(TINY / "tokenizer"), Pooling.of_folder(TINY / "tokenizer"))
    assert dict(model.layout.feeds) == {"input_0": "input_ids", "input_1": "attention_mask"}
    assert model.layout.token_output and model.layout.output == "output_0" and model.layout.dim == 32
    texts = json.loads((TINY / "texts.json").read_text())["texts"]
    refs = np.load(TINY / "refs.npy")
    for text, ref, got in zip(texts, refs, model.embed_all(texts), strict=True):
        assert _cos(got.vector, ref) >= 0.999, text
        assert abs(float(np.linalg.norm(got.vector)) - 1) < 1e-5            # Normalize, as modules.json says
    assert model.describe()["pooling"] == {"mode": "mean", "normalize": True,
                                           "from": str(TINY / "tokenizer" / "1_Pooling" / "config.json")}


def test_explicit_roles_and_their_errors(prog):
    lay = EmbeddingLayout.of(prog, ["input_ids", "attention_mask"])
    assert dict(lay.feeds) == {"input_0": "input_ids", "input_1": "attention_mask"}
    swapped = EmbeddingLayout.of(prog, ["attention_mask", "input_ids"])
    assert dict(swapped.feeds) == {"input_0": "attention_mask", "input_1": "input_ids"}
    for bad in (["input_ids"], ["input_ids", "input_ids"], ["input_ids", "mask"], ["attention_mask", "token_type_ids"]):
        with pytest.raises(LayoutError, match="--embeddings-inputs .* does not fit the program's inputs"):
            EmbeddingLayout.of(prog, bad)


@pytest.mark.parametrize("mode,expect", [
    ("mean", lambda t, m: t[m > 0].mean(0)), ("cls", lambda t, m: t[0]),
    ("max", lambda t, m: t[m > 0].max(0)), ("mean_sqrt_len", lambda t, m: t[m > 0].sum(0) / np.sqrt((m > 0).sum()))])
def test_pooling_modes_read_from_a_sentence_transformers_folder(tmp_path, mode, expect):
    (tmp_path / "modules.json").write_text(json.dumps([{"idx": 1, "path": "1_Pooling",
                                                        "type": "sentence_transformers.models.Pooling"}]))
    (tmp_path / "1_Pooling").mkdir()
    flags = {f"pooling_mode_{m}_token" if m == "cls" else f"pooling_mode_{m}_tokens": m == mode
             for m in ("mean", "cls", "max", "mean_sqrt_len")}
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(flags))
    pooling = Pooling.of_folder(tmp_path)
    assert (pooling.mode, pooling.normalize) == (mode, False)
    tokens = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    mask = np.array([1, 1, 1, 0, 0, 0])
    np.testing.assert_allclose(pooling(tokens, mask), expect(tokens, mask), rtol=1e-6)


def test_a_folder_without_sentence_transformers_modules_pools_by_mean(tmp_path):
    assert Pooling.of_folder(tmp_path) == Pooling() and Pooling().mode == "mean" and not Pooling().normalize


@pytest.mark.parametrize("config,says", [("{", "not valid JSON"), ("[]", "not a JSON object"),
                                         ('{"pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true}',
                                          "exactly one of")])
def test_a_broken_pooling_config_is_a_clear_error(tmp_path, config, says):
    (tmp_path / "modules.json").write_text(json.dumps([{"path": "p", "type": "sentence_transformers.models.Pooling"}]))
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "config.json").write_text(config)
    with pytest.raises(LayoutError, match=says):
        Pooling.of_folder(tmp_path)
