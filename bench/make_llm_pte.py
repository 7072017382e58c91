"""A float-I/O LLM .pte of ExecuTorch's Qualcomm layout with a real model's cache shapes, for the
host-work benchmark under the no-op backend (bench/bench_llm_host.py), where only the I/O shapes
matter: tests/helpers/llm_pte.TinyLlm at the given sizes (one kv head of width heads x head_dim:
the same bytes per K/V entry as the model it stands for).

    python bench/make_llm_pte.py OUT.pte [--layers 30 --context 256 --kv-width 192 --vocab 49152]
        [--model-dim 8]

Defaults: SmolLM2-135M (30 layers, 3 kv heads x 64, context 256, vocab 49152, prefill window 32).
`--model-dim` (the helper's tiny width by default) sets the weights' size, so the file's size: a
wider model stands for a big file where load time matters (hashing, the PD-need scan).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers import llm_pte


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--kv-width", type=int, default=192)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--prefill-window", type=int, default=32)
    ap.add_argument("--model-dim", type=int, default=llm_pte.E)
    args = ap.parse_args()
    # the helper's model sizes are module constants: set before the model is made
    llm_pte.L, llm_pte.D, llm_pte.C = args.layers, args.kv_width, args.context
    llm_pte.V, llm_pte.T_PREFILL, llm_pte.E = args.vocab, args.prefill_window, args.model_dim
    model = llm_pte.TinyLlm(seed=1)
    with tempfile.TemporaryDirectory() as d:
        binaries = model.binaries(Path(d))
    llm_pte.write_pte(model, binaries, args.out, float_io=True)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
