"""The long schemathesis run against a live `qnnrt serve` (run by hand; its result goes to
docs/RELIABILITY.md): the LLM fixture and the tiny embedding model the tests build, on loopback, with
an API key and --max-tokens 1; every phase of schemathesis (coverage, fuzzing, stateful) from the
server's /openapi.json; then the server's stderr is searched for tracebacks and /health asked.

    nice python tools/fuzz_serve.py [--max-examples 300] [--seed 1] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.helpers.embedding_model import write_model  # noqa: E402
from tests.helpers.llm_text import VOCAB, write_tokenizer_folder  # noqa: E402
from tests.serve import api_fuzz  # noqa: E402
from tests.serve.conftest import API_KEY, start_server  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-examples", type=int, default=300, help="per operation and phase (default 300)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--phases", default="coverage,fuzzing,stateful")
    ap.add_argument("--out", type=Path, default=None, help="where the report, HAR and server log go")
    a = ap.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="qnnrt-fuzz-serve-"))
    tok = write_tokenizer_folder(out / "tokenizer")
    prog = out / "embedder"
    subprocess.run([sys.executable, "-m", "qnnrt.cli", "build", str(write_model(out / "embedder.onnx", VOCAB)),
                    "-o", str(prog)], check=True, capture_output=True, cwd=ROOT)
    server = start_server(tok, out / "report.json", "--api-key", API_KEY, "--max-tokens", "1", "--max-queue", "4",
                          "--embeddings", str(prog), "--embeddings-tokenizer", str(tok), "--embeddings-name",
                          "tiny-embedder")
    try:
        r = api_fuzz.run(server.base, API_KEY, out, phases=a.phases, max_examples=a.max_examples, seed=a.seed)
        health = httpx.get(server.base + "/health", timeout=60).status_code
    finally:
        code = server.stop()
    err = server.stderr()
    (out / "serve.err").write_text(err)
    result = {"command": r.command, "summary": r.summary(), "cases": r.cases, "requests": r.requests,
              "statuses": r.statuses, "failures": len(r.failures), "errors": len(r.errors),
              "server_errors": r.server_errors, "tracebacks": err.count("Traceback"), "health_after": health,
              "server_exit": code, "seconds": round(r.seconds), "out": str(out)}
    print(json.dumps(result, indent=1))
    if r.failures or r.errors:
        print(r.output[-20000:])
    ok = r.exit_code == 0 and not r.server_errors and not result["tracebacks"] and health == 200
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
