"""Where the tests' files live: all in the repository (tests/data), each folder's README naming the
committed script that made it, so a fresh clone runs every test with nothing from outside."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
EXECUTORCH = DATA / "executorch"                       # small .pte files written by ExecuTorch 1.5.1
LLM = DATA / "llm"
LLM_STORIES = LLM / "llama_stories_fp16"               # ExecuTorch's llama.py, hybrid mode
LOOKAHEAD_STORIES = LLM / "lookahead_stories"          # the same weights, lookahead mode
SMOLLM2_TOKENIZER = LLM / "hf_tokenizer_smollm2"       # a real chat model's tokenizer folder
CHAT_TEMPLATE_REFS = LLM / "chat_template_refs.json"   # transformers' renderings of its template
WEIGHT_SHARED_BIN = LLM / "weight_shared_2graphs.bin"  # two graphs sharing one weight buffer
TINY_BERT = DATA / "embeddings" / "tiny_bert"          # a sentence-embedding .pte folder
GENIE = DATA / "genie"                                 # Genie bundles: tools/fixtures/make_genie_bundle.py
GENIE_F32 = GENIE / "tiny_llama_f32"                   # float, 4 parts, each one binary of prompt AR16 + token AR1
GENIE_F32_SHARED = GENIE / "tiny_llama_f32_shared"     # the same, weight-shared (the x86 simulator refuses it)
GENIE_W8A16 = GENIE / "tiny_llama_w8a16"               # the same weights quantized: uint16 activations, uint8 KV
GENIE_AIHUB_F32 = GENIE / "tiny_llama_aihub_f32"       # graphs as AI Hub exports them (mask clipped at -50,
GENIE_AIHUB_W8A16 = GENIE / "tiny_llama_aihub_w8a16"   # closed columns not zeroed), float and w8a16; Genie's tokens
GENIE_WHOLE_F32 = GENIE / "tiny_llama_whole_f32"       # one binary per AR, the whole model at CL 128 and 64
SHIMS = DATA                                           # the C sources of the tests' forwarding shims
CORRUPT_PTE = DATA / "corrupt_delegate.pte"            # a .pte whose delegate crashes QNN at load
FUZZ_CASES = DATA / "fuzz"                             # inputs the fuzzer found crashing (regressions)
PERF_LOGS = DATA / "perf"                              # ExecuTorch's QNN calls, logged by the shim

# Where the session's caches go (compiled test binaries, qnnrt's own caches): in the repository,
# git-ignored, never the user's home.
TEST_CACHE = Path(os.environ.get("QNNRT_TEST_CACHE_DIR", DATA.parents[1] / ".test-cache"))

# An extra artifact too big to commit (the 96 MB seed000_fits made by bench/make_seed_pte.py at
# sequence 64): tests that want it skip under this one name when the variable is unset.
LARGE_PTE_VAR = "QNNRT_TEST_LARGE_PTE"


def executorch_pte(name: str) -> Path:
    """The model.pte of one fixture folder under tests/data/executorch."""
    return EXECUTORCH / name / "model.pte"


def large_pte() -> Path:
    """The large .pte the environment names, or one skip that says how to get it."""
    value = os.environ.get(LARGE_PTE_VAR)
    if not value:
        pytest.skip(f"{LARGE_PTE_VAR} is not set (an optional large .pte: "
                    "bench/make_seed_pte.py OUT --seq 64 makes one)")
    path = Path(value)
    if not path.is_file():
        pytest.fail(f"{LARGE_PTE_VAR}={value} is not a file")
    return path
