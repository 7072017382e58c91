"""An embedding program served beside the LLM fixture against the same program run directly (run by
hand; numbers go to bench/RESULTS.md): /v1/models lists both, the served vectors are bit-identical
to `EmbeddingModel` in this process, their cosine to a float32 reference (refs.npy and texts.json of
tools/export_minilm.py or tools/fixtures/make_embedding_pte.py), and texts per second both ways.

    nice -n 10 python bench/bench_embeddings_served.py PROGRAM TOKENIZER_DIR REFS_DIR [--name NAME]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import qnnrt  # noqa: E402
from qnnrt.llm.embedding import EmbeddingModel, Pooling  # noqa: E402
from qnnrt.llm.text import TextTokenizer  # noqa: E402
from tests.helpers.llm_text import write_tokenizer_folder  # noqa: E402
from tests.serve.conftest import MODEL_ID, start_server  # noqa: E402


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("program")
    ap.add_argument("tokenizer")
    ap.add_argument("refs")
    ap.add_argument("--name", default="embedder")
    a = ap.parse_args()
    texts = json.loads((Path(a.refs) / "texts.json").read_text())
    if isinstance(texts, dict):     # tools/fixtures/make_embedding_pte.py: {"texts": [...], "seq": S}
        texts = [t for t in texts["texts"] if t]
    refs = np.load(Path(a.refs) / "refs.npy")
    with qnnrt.load(a.program) as p:
        m = EmbeddingModel(p, TextTokenizer.from_path(a.tokenizer), Pooling.of_folder(a.tokenizer))
        m.embed_all(texts[:1])
        t0 = time.perf_counter()
        direct = [e.vector for e in m.embed_all(texts)]
        direct_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        s = start_server(write_tokenizer_folder(Path(d) / "tok"), Path(d) / "report.json", "--embeddings",
                         a.program, "--embeddings-tokenizer", a.tokenizer, "--embeddings-name", a.name)
        try:
            with httpx.Client(base_url=s.base, timeout=1800) as c:
                models = [x["id"] for x in c.get("/v1/models").json()["data"]]
                c.post("/v1/embeddings", json={"model": a.name, "input": texts[:1]})
                t0 = time.perf_counter()
                r = c.post("/v1/embeddings", json={"model": a.name, "input": texts}).json()
                served_s = time.perf_counter() - t0
                chat = c.post("/v1/chat/completions", json={"model": MODEL_ID, "max_tokens": 3, "temperature": 0,
                                                            "messages": [{"role": "user", "content": "hi"}]})
        finally:
            s.stop()
    got = [np.asarray(x["embedding"], np.float32) for x in r["data"]]
    print(json.dumps({"models": models, "llm_status": chat.status_code, "usage": r["usage"],
                      "bit_identical_to_direct": all(np.array_equal(x, y) for x, y in zip(got, direct)),
                      "cosine_to_reference": [round(cosine(x, y), 7) for x, y in zip(got, refs)],
                      "max_abs_to_reference": float(max(np.abs(x - y).max() for x, y in zip(got, refs))),
                      "direct_per_s": round(len(texts) / direct_s, 4), "served_per_s": round(len(texts) / served_s, 4),
                      "served_over_direct": round(direct_s / served_s, 3)}, indent=1))


if __name__ == "__main__":
    main()
