"""Write the ExecuTorch-made chain the fast-path figures in bench/RESULTS.md use: 66 small QNN
delegates ([1,64] fp16, relu(x * 0.5 + 0.25)) with a 64x64 `aten::mm` on the CPU between each pair.

Needs ExecuTorch 1.5.1: the kit of bench/anchor (`bash bench/anchor/setup.sh ANCHOR`, README.md there):
    . ANCHOR/env.sh; $ET_PY bench/make_chain_pte.py OUT_DIR [--blocks 66] [--width 64]
Writes OUT_DIR/chain66_et.pte and OUT_DIR/chain66_et_input_0.npy (seed 0).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from executorch.backends.qualcomm.serialization.qc_schema import QcomChipset
from executorch.backends.qualcomm.utils.utils import (generate_htp_compiler_spec,
                                                      generate_qnn_executorch_compiler_spec,
                                                      to_edge_transform_and_lower_to_qnn)


class Chain(torch.nn.Module):
    def __init__(self, blocks: int, width: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.blocks = blocks
        self.w = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(width, width, generator=g) / width ** 0.5)
            for _ in range(blocks - 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.blocks):
            x = torch.relu(x * 0.5 + 0.25)          # one QNN delegate
            if i < self.blocks - 1:
                x = torch.mm(x, self.w[i])           # kept on the CPU: aten::mm.out
        return x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--blocks", type=int, default=66)
    ap.add_argument("--width", type=int, default=64)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    model = Chain(a.blocks, a.width).eval()
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, a.width)).astype(np.float32))
    specs = generate_qnn_executorch_compiler_spec(
        soc_model=QcomChipset.SM8650, backend_options=generate_htp_compiler_spec(use_fp16=True))
    edge = to_edge_transform_and_lower_to_qnn(model, (x,), specs,
                                              skip_node_op_set={"aten.mm.default"})
    et = edge.to_executorch()
    name = f"chain{a.blocks}_et"
    (out / f"{name}.pte").write_bytes(et.buffer)
    np.save(out / f"{name}_input_0.npy", x.numpy())
    print(f"wrote {out / name}.pte ({len(et.buffer)} bytes)")


if __name__ == "__main__":
    main()
