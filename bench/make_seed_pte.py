"""Write the seed-000-shaped ExecuTorch program at any sequence length and size, with ExecuTorch's own
export path.

The model is the seed000_fits fixture's (sequence 64, 96 MB, not in the repository; its weights are
this script's at the default shape): a Llama-3.2-1B-shaped decoder stack with random weights drawn in
a fixed order from one seed-0 generator, every projection a low-rank `torch.mm` pair kept on the CPU
(`aten::mm.out`), everything else lowered to the HTP (fp16, SM8650) by ExecuTorch's QNN partitioner,
one delegate per CPU-separated region: with 16 layers, 65 delegates, one context binary each. The
inputs x are a numpy seed-0 draw. At long sequences the contexts' PD need exceeds the simulator's one
PD: that is the file this script exists to make, so a runtime can be tried on what ExecuTorch itself
cannot load. `--hidden/--mlp/--heads/--kv-heads/--vocab/--rank` shrink the widths and keep the
structure (16 layers, 65 delegates, the CPU kernels between them).

Needs ExecuTorch 1.5.1 and torch 2.13: the kit of bench/anchor (`bash bench/anchor/setup.sh ANCHOR`,
README.md there: a venv with them and a QNN SDK root of onnxruntime-qnn's QNN 2.51 libraries).
    . ANCHOR/env.sh; nice -n 10 $ET_PY bench/make_seed_pte.py OUT_DIR --seq 1024
tests/data/executorch/seed_small (5 MB) is
    . ANCHOR/env.sh; nice -n 10 $ET_PY bench/make_seed_pte.py tests/data/executorch/seed_small \
        --seq 16 --hidden 128 --mlp 512 --heads 4 --kv-heads 2 --vocab 256 --rank 8
Writes OUT_DIR/model.pte, OUT_DIR/inputs/{x,cos,sin,mask}.npy (the method's inputs in order) and
OUT_DIR/ref/{logits,h}.npy (float32 eager references, the method's outputs in order). A re-run writes
the same bytes but for each QNN delegate's 8-byte signature (ExecuTorch's export time).
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class SeedShape:
    """The dimensions: the defaults are seed000_fits' (Llama-3.2-1B's widths, vocabulary 4096)."""
    hidden: int = 2048
    layers: int = 16
    heads: int = 32
    kv_heads: int = 8
    mlp: int = 8192
    vocab: int = 4096
    rank: int = 32
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class LowRank(torch.nn.Module):
    """x @ a @ b as two `torch.mm` calls, which the export keeps on the CPU."""

    def __init__(self, n_in: int, n_out: int, rank: int, gain: float, g: torch.Generator) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(n_in, rank, generator=g) / math.sqrt(n_in))
        self.b = torch.nn.Parameter(torch.randn(rank, n_out, generator=g) * (gain / math.sqrt(rank)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(torch.mm(x, self.a), self.b)


def _norm_weight(n: int, g: torch.Generator) -> torch.nn.Parameter:
    return torch.nn.Parameter(1.0 + 0.1 * torch.randn(n, generator=g))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(torch.nn.Module):
    """Pre-norm attention (grouped-query, rotary) and SiLU-gated MLP; residual writers at half gain."""

    def __init__(self, s: SeedShape, g: torch.Generator) -> None:
        super().__init__()
        self.s = s
        kv = s.kv_heads * s.head_dim
        self.attn_norm = _norm_weight(s.hidden, g)
        self.mlp_norm = _norm_weight(s.hidden, g)
        self.q = LowRank(s.hidden, s.hidden, s.rank, 1.0, g)
        self.k = LowRank(s.hidden, kv, s.rank, 1.0, g)
        self.v = LowRank(s.hidden, kv, s.rank, 1.0, g)
        self.o = LowRank(s.hidden, s.hidden, s.rank, 0.5, g)
        self.gate = LowRank(s.hidden, s.mlp, s.rank, 1.0, g)
        self.up = LowRank(s.hidden, s.mlp, s.rank, 1.0, g)
        self.down = LowRank(s.mlp, s.hidden, s.rank, 0.5, g)

    def _heads(self, t: torch.Tensor, n: int) -> torch.Tensor:
        return t.view(t.shape[0], n, self.s.head_dim).transpose(0, 1)

    def attention(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  mask: torch.Tensor) -> torch.Tensor:
        s = self.s
        q = self._heads(self.q(h), s.heads)
        k = self._heads(self.k(h), s.kv_heads)
        v = self._heads(self.v(h), s.kv_heads)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        group = s.heads // s.kv_heads
        k = k.repeat_interleave(group, dim=0)
        v = v.repeat_interleave(group, dim=0)
        scores = torch.matmul(q, k.transpose(1, 2)) * (1.0 / math.sqrt(s.head_dim)) + mask
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.o(out.transpose(0, 1).reshape(h.shape[0], s.hidden))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        eps = self.s.norm_eps
        x = x + self.attention(F.rms_norm(x, (self.s.hidden,), self.attn_norm, eps), cos, sin, mask)
        h = F.rms_norm(x, (self.s.hidden,), self.mlp_norm, eps)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class SeedModel(torch.nn.Module):
    """forward(x [S,hidden], cos, sin [S,head_dim], mask [S,S]) -> (logits [S,vocab], h [S,hidden])."""

    def __init__(self, s: SeedShape, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.s = s
        self.layers = torch.nn.ModuleList(Layer(s, g) for _ in range(s.layers))
        self.final_norm = _norm_weight(s.hidden, g)
        self.head = LowRank(s.hidden, s.vocab, s.rank, 1.0, g)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq = x.shape[0]
        cos3 = cos.view(1, seq, self.s.head_dim)
        sin3 = sin.view(1, seq, self.s.head_dim)
        mask3 = mask.view(1, seq, seq)
        for layer in self.layers:
            x = layer(x, cos3, sin3, mask3)
        h = F.rms_norm(x, (self.s.hidden,), self.final_norm, self.s.norm_eps)
        return self.head(h), h


def make_inputs(s: SeedShape, seq: int) -> dict[str, torch.Tensor]:
    """x (standard normal, numpy seed 0), rotary cos/sin for positions 0..seq-1, additive causal mask."""
    x = np.random.default_rng(0).standard_normal((seq, s.hidden), dtype=np.float32)
    inv_freq = 1.0 / (s.rope_theta ** (torch.arange(0, s.head_dim, 2, dtype=torch.float32) / s.head_dim))
    freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    angles = torch.cat((freqs, freqs), dim=-1)
    mask = torch.triu(torch.full((seq, seq), -10000.0), diagonal=1)
    return {"x": torch.from_numpy(x), "cos": torch.cos(angles), "sin": torch.sin(angles), "mask": mask}


def export_pte(model: SeedModel, inputs: tuple[torch.Tensor, ...]) -> bytes:
    """ExecuTorch's QNN lowering (HTP fp16, SM8650) with every `aten.mm` left to the CPU."""
    from executorch.backends.qualcomm.serialization.qc_schema import QcomChipset
    from executorch.backends.qualcomm.utils.utils import (generate_htp_compiler_spec,
                                                          generate_qnn_executorch_compiler_spec,
                                                          to_edge_transform_and_lower_to_qnn)
    specs = generate_qnn_executorch_compiler_spec(
        soc_model=QcomChipset.SM8650, backend_options=generate_htp_compiler_spec(use_fp16=True))
    edge = to_edge_transform_and_lower_to_qnn(model, inputs, specs, skip_node_op_set={"aten.mm.default"})
    return edge.to_executorch().buffer


def main() -> None:
    d = SeedShape()
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("out", type=Path, help="folder for model.pte, inputs/ and ref/")
    ap.add_argument("--seq", type=int, default=1024, help="sequence length (seed000_fits': 64)")
    ap.add_argument("--hidden", type=int, default=d.hidden, help=f"model width ({d.hidden})")
    ap.add_argument("--layers", type=int, default=d.layers, help=f"decoder layers ({d.layers}: 4 delegates each, "
                                                                 "and one for the final norm)")
    ap.add_argument("--heads", type=int, default=d.heads, help=f"query heads ({d.heads})")
    ap.add_argument("--kv-heads", type=int, default=d.kv_heads, help=f"key/value heads ({d.kv_heads})")
    ap.add_argument("--mlp", type=int, default=d.mlp, help=f"MLP width ({d.mlp})")
    ap.add_argument("--vocab", type=int, default=d.vocab, help=f"output width ({d.vocab})")
    ap.add_argument("--rank", type=int, default=d.rank, help=f"rank of each low-rank projection ({d.rank})")
    a = ap.parse_args()
    for name in ("seq", "hidden", "layers", "heads", "kv_heads", "mlp", "vocab", "rank"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be positive, got {getattr(a, name)}")
    if a.hidden % a.heads or (a.hidden // a.heads) % 2 or a.heads % a.kv_heads:
        ap.error(f"--hidden {a.hidden} must split into --heads {a.heads} of even width, and the heads "
                 f"into --kv-heads {a.kv_heads} groups")
    shape = SeedShape(hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads, mlp=a.mlp,
                      vocab=a.vocab, rank=a.rank)
    model = SeedModel(shape).eval()
    named = make_inputs(shape, a.seq)
    inputs = tuple(named.values())
    (a.out / "inputs").mkdir(parents=True, exist_ok=True)
    (a.out / "ref").mkdir(parents=True, exist_ok=True)
    for name, t in named.items():
        np.save(a.out / "inputs" / f"{name}.npy", t.numpy())
    with torch.no_grad():
        logits, h = model(*inputs)
    np.save(a.out / "ref" / "logits.npy", logits.numpy())
    np.save(a.out / "ref" / "h.npy", h.numpy())
    pte = export_pte(model, inputs)
    (a.out / "model.pte").write_bytes(pte)
    print(f"wrote {a.out / 'model.pte'} ({len(pte)} bytes), inputs/ and ref/ at sequence {a.seq}, {shape}")


if __name__ == "__main__":
    main()
