"""/v1/embeddings through a live `qnnrt serve`: a tiny MiniLM-shaped ONNX model (tests/helpers/
embedding_model.py) built with `qnnrt build` in the test run and served beside the LLM fixture;
vectors bit-identical to the same program run directly, close to the float32 reference."""
from __future__ import annotations

import base64

import numpy as np
import pytest

from tests.helpers.embedding_model import DIM, SEQ, reference, table
from tests.helpers.llm_text import VOCAB, text_folder  # noqa: F401
from tests.serve.conftest import API_KEY, MODEL_ID, start_server
from tests.serve.test_serve import assert_openai_error, client, post

openai = pytest.importorskip("openai", reason="needs the openai client (pip install -e '.[test]')")
httpx = pytest.importorskip("httpx", reason="needs httpx (pip install -e '.[test]')")

pytestmark = pytest.mark.slow
EMB_ID = "tiny-embedder"
TEXTS = ["Once upon a time there was a little cat.", "The dog ran to the park",
         "Grüße aus Köln " * 10]       # the last one longer than the program's sequence: truncated if asked


@pytest.fixture(scope="module")
def program(embedding_program):
    return embedding_program


@pytest.fixture(scope="module")
def server(program, text_folder, tmp_path_factory):  # noqa: F811
    s = start_server(text_folder, tmp_path_factory.mktemp("serve") / "report.json", "--api-key", API_KEY,
                     "--embeddings", str(program), "--embeddings-tokenizer", str(text_folder),
                     "--embeddings-name", EMB_ID)
    yield s
    if s.proc.poll() is None:
        s.stop()


@pytest.fixture(scope="module")
def direct(program, text_folder):  # noqa: F811
    """The same program run in this process: (vectors, token counts, the programs' inputs)."""
    import qnnrt
    from qnnrt.llm.embedding import EmbeddingModel
    from qnnrt.llm.text import TextTokenizer
    with qnnrt.load(str(program)) as prog:
        m = EmbeddingModel(prog, TextTokenizer.from_path(text_folder))
        assert (m.layout.seq_len, m.layout.dim) == (SEQ, DIM)
        feeds = [m.inputs(t)[0] for t in TEXTS]
        done = m.embed_all(TEXTS)
    return [e.vector for e in done], [e.tokens for e in done], feeds


def test_models_lists_both(server):
    assert [m.id for m in client(server).models.list().data] == [MODEL_ID, EMB_ID]


def test_embeddings_equal_the_program_run_directly(server, direct):
    vectors, tokens, feeds = direct
    raw = post(server, "/v1/embeddings", {"model": EMB_ID, "input": TEXTS, "encoding_format": "float",
                                          "truncate": True}).json()
    got = [np.asarray(d["embedding"], dtype=np.float32) for d in raw["data"]]
    assert [d["index"] for d in raw["data"]] == [0, 1, 2]
    assert all(np.array_equal(a, b) for a, b in zip(got, vectors))
    assert raw["usage"]["prompt_tokens"] == sum(tokens) and tokens[2] == SEQ
    b64 = post(server, "/v1/embeddings", {"model": EMB_ID, "input": TEXTS, "encoding_format": "base64",
                                          "truncate": True}).json()
    assert all(np.array_equal(np.frombuffer(base64.b64decode(d["embedding"]), "<f4"), v)
               for d, v in zip(b64["data"], vectors))
    via_client = client(server).embeddings.create(model=EMB_ID, input=TEXTS[0],     # the client asks base64
                                                  extra_body={"truncate": True})
    assert np.array_equal(np.asarray(via_client.data[0].embedding, dtype=np.float32), vectors[0])
    weights = table(VOCAB)
    for v, feed in zip(vectors, feeds):        # the HTP computes in fp16
        ref = reference(feed["input_ids"][0], feed["attention_mask"][0], weights)
        np.testing.assert_allclose(v, ref, atol=5e-3, rtol=5e-3)


def test_an_input_past_the_sequence_is_a_400_unless_truncate(server, direct, text_folder):  # noqa: F811
    e = assert_openai_error(post(server, "/v1/embeddings", {"model": EMB_ID, "input": TEXTS}), 400)
    assert (e["param"], e["code"]) == ("input[0]", "context_length_exceeded") and f"sequence of {SEQ}" in e["message"]
    from qnnrt.llm.text import TextTokenizer
    tok = TextTokenizer.from_path(text_folder)
    ids = [tok.encode(t) for t in TEXTS]
    e = assert_openai_error(post(server, "/v1/embeddings", {"model": EMB_ID, "input": ids[2]}), 400)
    assert e["code"] == "context_length_exceeded"
    vectors, tokens, _ = direct
    assert tokens[1] < SEQ                                                 # this one fits
    one = post(server, "/v1/embeddings", {"model": EMB_ID, "input": ids[1], "encoding_format": "float"}).json()
    assert np.array_equal(np.asarray(one["data"][0]["embedding"], dtype=np.float32), vectors[1])   # = the text
    many = post(server, "/v1/embeddings", {"model": EMB_ID, "input": ids, "encoding_format": "float",
                                           "truncate": True}).json()
    assert [len(d["embedding"]) for d in many["data"]] == [DIM] * 3
    assert all(np.array_equal(np.asarray(d["embedding"], dtype=np.float32), v) for d, v in zip(many["data"], vectors))
    assert many["usage"]["prompt_tokens"] == sum(tokens)


def test_embedding_errors_are_openai_shaped(server):
    assert_openai_error(post(server, "/v1/embeddings", {"model": MODEL_ID, "input": "x"}), 404)
    assert_openai_error(post(server, "/v1/embeddings", {"model": EMB_ID, "input": []}), 400)
    e = assert_openai_error(post(server, "/v1/embeddings", {"model": EMB_ID, "input": [[1, 2], "x"]}), 400)
    assert e["param"] == "input"                                          # token ids and texts mixed
    e = assert_openai_error(post(server, "/v1/embeddings", {"model": EMB_ID, "input": [1, 100000]}), 400)
    assert e["param"] == "input" and "vocabulary" in e["message"]
    assert_openai_error(post(server, "/v1/embeddings", {"model": EMB_ID, "input": "x", "dimensions": 3}), 400)
    assert_openai_error(post(server, "/v1/embeddings", {"model": EMB_ID, "input": "x", "encoding_format": "hex"}),
                        400)
    r = client(server).chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=2, temperature=0)          # the LLM still answers
    assert r.choices[0].finish_reason in ("stop", "length")
    assert httpx.get(server.base + "/health", timeout=30).json()["status"] == "ok"
