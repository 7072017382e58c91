"""A Hugging Face folder shaped like Llama-3.2-1B (or -3B) with seeded random weights, for the
"bigger than one PD" benchmark of `qnnrt convert` (bench/convert_llama32_shaped.py):

    python tools/make_llama32_shaped.py OUT [--shape 1b|3b] [--vocab N] [--layers N]

Llama-3.2-1B: 16 layers, hidden 2048, 32 heads / 8 KV heads of 64, intermediate 8192, vocab 128256,
tied embeddings, rope theta 500000 with llama3 scaling (factor 32, low 1, high 4, original 8192);
-3B: 28 layers, hidden 3072, 24 heads / 8 KV heads of 128, intermediate 8192. --vocab / --layers
change only those (the bench's runnable variant; see bench/RESULTS.md). The weights are float16
safetensors, written tensor by tensor (the peak memory is one tensor), each tensor from its own seed
so the folder is the same whatever the order. tokenizer.json is a word-level tokenizer of the vocab's
size ("w<id>" words, BOS / EOS at Llama 3's ids when the vocab is the real one, else 256 below its top);
the benchmark gives token ids, never text."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {
    "1b": {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
           "head_dim": 64, "intermediate_size": 8192},
    "3b": {"hidden_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
           "head_dim": 128, "intermediate_size": 8192},
}
VOCAB = 128256
SEED = 32
# the tied embedding's scale: small against the layers' sum (as in trained models), else the head's dot
# product with the last input's own row dominates and the model only repeats its last token
EMBED_STD = 0.05


def config(shape: str, vocab: int, layers: int | None) -> dict:
    cfg = {**SHAPES[shape], "architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "vocab_size": vocab, "tie_word_embeddings": True, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192},
           "max_position_embeddings": 131072, "hidden_act": "silu", "attention_bias": False,
           "bos_token_id": vocab - 256, "eos_token_id": vocab - 255, "torch_dtype": "float16"}
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    return cfg


def tensor_shapes(cfg: dict) -> dict[str, tuple[tuple[int, ...], float]]:
    """name -> (shape, gain): Hugging Face's [out, in] projections; gain scales N(0, 1 / in)."""
    H, F, D = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * D, cfg["num_key_value_heads"] * D
    out: dict[str, tuple[tuple[int, ...], float]] = {"model.embed_tokens.weight": ((cfg["vocab_size"], H), 0.0)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": ((H,), -1.0), p + "self_attn.q_proj.weight": ((q, H), 2.0),
                    p + "self_attn.k_proj.weight": ((kv, H), 2.0), p + "self_attn.v_proj.weight": ((kv, H), 1.0),
                    p + "self_attn.o_proj.weight": ((H, q), 1.0), p + "post_attention_layernorm.weight": ((H,), -1.0),
                    p + "mlp.gate_proj.weight": ((F, H), 1.0), p + "mlp.up_proj.weight": ((F, H), 1.0),
                    p + "mlp.down_proj.weight": ((H, F), 1.0)})
    out["model.norm.weight"] = ((H,), -1.0)
    return out


def make_tensor(index: int, shape: tuple[int, ...], gain: float) -> np.ndarray:
    """Gain 0: the embedding, N(0, EMBED_STD^2); -1: a norm weight, 1 + N(0, 0.1); else N(0, gain^2 / in)."""
    rng = np.random.default_rng([SEED, index])
    x = rng.standard_normal(shape, dtype=np.float32)
    if gain == 0.0:
        return (x * np.float32(EMBED_STD)).astype(np.float16)
    if gain < 0:
        return (1 + 0.1 * x).astype(np.float16)
    return (x * np.float32(gain / np.sqrt(shape[-1]))).astype(np.float16)


def write_weights(path: Path, cfg: dict) -> int:
    """model.safetensors (F16), one tensor in memory at a time; returns its size in bytes."""
    from qnnrt.formats.safetensors_file import write_safetensors
    shapes = tensor_shapes(cfg)
    index = {name: j for j, name in enumerate(shapes)}
    return write_safetensors(path, {name: (shape, "F16") for name, (shape, _) in shapes.items()},
                             lambda name: make_tensor(index[name], *shapes[name]))


def write_tokenizer(out: Path, cfg: dict) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    vocab = cfg["vocab_size"]
    bos, eos = cfg["bos_token_id"], cfg["eos_token_id"]
    names = {i: f"w{i}" for i in range(vocab)}
    names[bos], names[eos] = "<|begin_of_text|>", "<|end_of_text|>"
    tok = Tokenizer(models.WordLevel({t: i for i, t in names.items()}, unk_token=names[0]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")       # joins words with spaces
    tok.add_special_tokens([names[bos], names[eos]])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": names[bos], "eos_token": names[eos], "add_bos_token": False}, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": bos, "eos_token_id": eos, "do_sample": False}, indent=2) + "\n")


def make(out: Path, shape: str = "1b", vocab: int = VOCAB, layers: int | None = None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    cfg = config(shape, vocab, layers)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    write_weights(out / "model.safetensors", cfg)
    write_tokenizer(out, cfg)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--layers", type=int, default=None)
    a = ap.parse_args()
    if a.vocab < 512:
        ap.error("--vocab: give at least 512 (BOS / EOS sit 256 below the top)")
    path = make(a.out, a.shape, a.vocab, a.layers)
    print(f"wrote {path} ({(path / 'model.safetensors').stat().st_size / 2**30:.2f} GiB of float16 weights)")


if __name__ == "__main__":
    main()
