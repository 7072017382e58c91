"""A soak of `qnnrt serve` (run by hand; the table goes to docs/RELIABILITY.md): the LLM fixture and
the tiny embedding model the tests build, 2,000 short requests (max_tokens 1-2: chat and completions,
streamed and not, logprobs, embeddings, a 400 and a 404) over one keep-alive connection, the serving
process's RSS, open fds and threads read from /proc every 100 requests.

    nice python bench/serve_soak.py [--requests 2000] [--every 100]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.helpers.embedding_model import write_model  # noqa: E402
from tests.helpers.llm_text import VOCAB, write_tokenizer_folder  # noqa: E402
from tests.serve import soak  # noqa: E402
from tests.serve.conftest import API_KEY, MODEL_ID, start_server  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--every", type=int, default=100)
    a = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="qnnrt-serve-soak-"))
    tok = write_tokenizer_folder(out / "tokenizer")
    prog = out / "embedder"
    subprocess.run([sys.executable, "-m", "qnnrt.cli", "build", str(write_model(out / "embedder.onnx", VOCAB)),
                    "-o", str(prog)], check=True, capture_output=True, cwd=ROOT)
    server = start_server(tok, out / "report.json", "--api-key", API_KEY, "--embeddings", str(prog),
                          "--embeddings-tokenizer", str(tok), "--embeddings-name", "tiny-embedder")
    try:
        pid = server.worker_pid()
        assert pid is not None
        samples = soak.soak(server.base, {"Authorization": f"Bearer {API_KEY}"}, pid, requests=a.requests,
                            every=a.every, model=MODEL_ID, embeddings="tiny-embedder")
    finally:
        code = server.stop()
    print(soak.table(samples))
    warm = samples[min(2, len(samples) - 1)]
    last = samples[-1]
    print(json.dumps({"requests": a.requests, "rss_mb_after_warmup": round(warm.rss_mb, 1),
                      "rss_mb_last": round(last.rss_mb, 1), "rss_growth_mb": round(last.rss_mb - warm.rss_mb, 2),
                      "fds": [warm.fds, last.fds], "threads": [warm.threads, last.threads],
                      "tracebacks": server.stderr().count("Traceback"), "server_exit": code,
                      "seconds": round(last.seconds)}))


if __name__ == "__main__":
    main()
