"""`qnnrt serve --embeddings` with an embedding .pte written the ordinary way by ExecuTorch (no input
names, token embeddings out: tests/data/embeddings/tiny_bert): it starts, maps the inputs by
position, pools as the tokenizer folder says, and the official client's vectors match the float32
references; roles that do not fit the file are refused before serving."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers.cli_helpers import ROOT
from tests.helpers.data import TINY_BERT
from tests.helpers.llm_text import text_folder  # noqa: F401
from tests.helpers.readme import shell_command
from tests.serve.conftest import API_KEY, FIX, launch
from tests.serve.test_serve import client

openai = pytest.importorskip("openai", reason="needs the openai client (pip install -e '.[test]')")
pytestmark = pytest.mark.slow
TINY = TINY_BERT
EMB_ID = "model"          # the --embeddings file's stem: the docs' command names none


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """docs/serving.md's embeddings command as written (the clone's chat bundle and tiny_bert), on a free
    port, with a key and a report."""
    argv = shell_command("qnnrt serve tests/data/genie/tiny_llama_f32 --model-name tiny --embeddings")
    report = tmp_path_factory.mktemp("serve") / "report.json"
    s = launch([*argv[1:], "--port", "0", "--api-key", API_KEY, "--report", str(report)], report)
    yield s
    if s.proc.poll() is None:
        s.stop()


def test_an_executorch_embedding_pte_serves_the_reference_vectors(server):
    texts = json.loads((TINY / "texts.json").read_text())["texts"][:4]
    refs = np.load(TINY / "refs.npy")
    got = client(server).embeddings.create(model=EMB_ID, input=texts)
    assert [d.index for d in got.data] == list(range(len(texts)))
    for d, ref in zip(got.data, refs, strict=False):
        v = np.asarray(d.embedding, dtype=np.float32)
        assert float(v @ ref / (np.linalg.norm(v) * np.linalg.norm(ref))) >= 0.999
    assert server.stop() == 143
    emb = json.loads(server.report.read_text())["embeddings"]
    assert emb["inputs"] == {"input_0": "input_ids", "input_1": "attention_mask"}
    assert emb["pooling"]["mode"] == "mean" and emb["pooling"]["normalize"] is True


def test_embedding_roles_that_do_not_fit_are_refused(text_folder):  # noqa: F811
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", "serve", str(FIX / "model.pte"), "--tokenizer",
                        str(text_folder), "--port", "0", "--embeddings", str(TINY / "model.pte"),
                        "--embeddings-tokenizer", str(TINY / "tokenizer"), "--embeddings-inputs", "input_ids"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "--embeddings-inputs input_ids does not fit" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
