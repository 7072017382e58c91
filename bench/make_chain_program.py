"""Write an EPContext chain program for bench_dispatch.py: N contexts (the test suite's four compiled
add_relu_mul binaries, copied) with an ONNX Runtime Tanh segment between each pair.

    python bench/make_chain_program.py OUT_DIR [--n 66]
Writes OUT_DIR/chain.onnx and OUT_DIR/contexts/ (compiled once, cached under ~/.cache/qnnrt).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.program_fixtures import DISTINCT, make_chain
from tests.helpers.qnn_fixtures import add_relu_mul, compile_models


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=66)
    a = ap.parse_args()
    out = Path(a.out)
    work = out / "build"
    work.mkdir(parents=True, exist_ok=True)
    binaries = [compile_models([add_relu_mul(seed=s, name=f"s{s}")], [f"s{s}"], work / f"s{s}")
                for s in range(DISTINCT)]
    chain = make_chain(out, binaries, a.n)
    print(f"wrote {chain.model}")


if __name__ == "__main__":
    main()
