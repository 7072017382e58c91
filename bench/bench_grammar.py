"""Constrained decoding and embeddings cost (run by hand; numbers go to bench/RESULTS.md).

1. The grammar mask per token on SmolLM2's 49k vocabulary: a greedy sampler over random logits
   with and without a llguidance matcher (mask computed, applied, token accepted), for a JSON schema
   and the forced tool-call grammar; the difference per token against the plain sampler.
2. Embeddings per second through `qnnrt serve` (one request of N texts) against the same program
   run directly in this process, on the tiny MiniLM-shaped model (tests/helpers/embedding_model.py).

    nice -n 10 python bench/bench_grammar.py [--tokens 300] [--texts 64] [--skip-serve]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from qnnrt.llm.grammar import GrammarCompiler  # noqa: E402
from qnnrt.llm.sampling import Sampler, SamplingOptions  # noqa: E402
from qnnrt.llm.text import TextTokenizer  # noqa: E402
from qnnrt.serve.tools import forced_call_lark, parse_tools  # noqa: E402

SMOLLM2 = Path(__file__).resolve().parents[1] / "tests" / "data" / "llm" / "hf_tokenizer_smollm2"
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 20},
    "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                 "zip": {"type": "string", "pattern": "[0-9]{5}"}},
                "required": ["city", "zip"], "additionalProperties": False}},
    "required": ["name", "age", "tags", "address"], "additionalProperties": False}
TOOLS = {"tools": [{"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "days": {"type": "integer"}},
    "required": ["city", "days"], "additionalProperties": False}}}], "tool_choice": "required"}


def per_token_ms(sampler_of, rows: list[np.ndarray], eos: int) -> list[float]:
    """Each call's time over ``rows``; a finished output starts again (a fresh sampler)."""
    times, s = [], sampler_of()
    for r in rows:
        t0 = time.perf_counter()
        tok = s(r)
        times.append((time.perf_counter() - t0) * 1e3)
        if tok == eos:
            s = sampler_of()
    return times


def mask_cost(n: int) -> dict:
    tok = TextTokenizer.from_path(SMOLLM2)
    vocab, eos = tok.vocab_size, tok.eos_ids[0]
    compiler = GrammarCompiler(tok, vocab, tok.eos_ids)
    t0 = time.perf_counter()
    grammars = {"json_schema": compiler.json_schema(SCHEMA)}
    first_compile_s = time.perf_counter() - t0
    req = parse_tools(TOOLS)
    assert req is not None
    grammars["forced tool call"] = compiler.lark(forced_call_lark(req))
    rng = np.random.default_rng(0)
    rows = [rng.normal(size=vocab).astype(np.float32) * 4 for _ in range(n)]
    plain = per_token_ms(lambda: Sampler(SamplingOptions()), rows, eos)
    out = {"vocab": vocab, "tokens": n, "first_grammar_s (tokenizer walk + compile)": round(first_compile_s, 3),
           "plain_ms_median": round(statistics.median(plain), 4)}
    for name, g in grammars.items():
        masked = per_token_ms(lambda g=g: Sampler(SamplingOptions(), g.matcher()), rows, eos)
        diff = [m - p for m, p in zip(masked, plain)]
        out[name] = {"masked_ms_median": round(statistics.median(masked), 4),
                     "mask_cost_ms_median": round(statistics.median(diff), 4),
                     "mask_cost_ms_p90": round(float(np.percentile(diff, 90)), 4),
                     "mask_cost_ms_max": round(max(diff), 3)}
    return out


def _median_s(fn, repeats: int) -> float:
    """Median wall time of ``fn`` after two warm-up calls."""
    fn(), fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def embeddings_rate(n_texts: int, tmp: Path, repeats: int = 7) -> dict:
    import httpx

    import qnnrt
    from qnnrt.llm.embedding import EmbeddingModel
    from tests.helpers.embedding_model import write_model
    from tests.helpers.llm_text import VOCAB, write_tokenizer_folder
    from tests.serve.conftest import start_server
    tok_dir = write_tokenizer_folder(tmp / "tok")
    prog = tmp / "embedder"
    subprocess.run([sys.executable, "-m", "qnnrt.cli", "build", str(write_model(tmp / "e.onnx", VOCAB)), "-o",
                    str(prog)], check=True, capture_output=True, cwd=ROOT)
    texts = [f"sentence number {i} about a little cat in the garden" for i in range(n_texts)]
    with qnnrt.load(str(prog)) as p:
        m = EmbeddingModel(p, TextTokenizer.from_path(tok_dir))
        direct_s = _median_s(lambda: m.embed_all(texts), repeats)
    s = start_server(tok_dir, tmp / "report.json", "--embeddings", str(prog), "--embeddings-tokenizer",
                     str(tok_dir), "--embeddings-name", "e")
    try:
        body = json.dumps({"model": "e", "input": texts})
        with httpx.Client(base_url=s.base, timeout=600) as c:       # one connection, as an application keeps
            def once() -> None:
                r = c.post("/v1/embeddings", content=body)
                assert r.status_code == 200, r.text
            served_s = _median_s(once, repeats)
    finally:
        s.stop()
    return {"texts": n_texts, "direct_per_s": round(n_texts / direct_s, 1),
            "served_per_s": round(n_texts / served_s, 1), "served_over_direct": round(direct_s / served_s, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--texts", type=int, default=64)
    ap.add_argument("--skip-serve", action="store_true")
    a = ap.parse_args()
    print(json.dumps({"mask": mask_cost(a.tokens)}, indent=1))
    if not a.skip_serve:
        with tempfile.TemporaryDirectory() as d:
            print(json.dumps({"embeddings": embeddings_rate(a.texts, Path(d))}, indent=1))


if __name__ == "__main__":
    main()
