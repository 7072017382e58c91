"""Sentence embeddings from a program compiled at a fixed sequence length (all-MiniLM-L6-v2's ONNX
export, built with `qnnrt build`, or a .pte / EPContext model of the same shape): text tokenized with
the model's own tokenizer folder (its special tokens added, as sentence-transformers does), padded or
truncated to the program's sequence, one run per text, the program's output as the vector."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from qnnrt.llm.errors import LayoutError, TokenizerError
from qnnrt.llm.text import TextTokenizer

IDS, MASK, TYPES = "input_ids", "attention_mask", "token_type_ids"


@dataclass(frozen=True)
class EmbeddingLayout:
    """Which method and inputs the program has, its sequence and vector sizes."""
    method: str
    seq_len: int
    dim: int
    output: str
    input_dtypes: dict[str, np.dtype]

    @classmethod
    def of(cls, program: Any) -> EmbeddingLayout:
        if len(program.methods) != 1:
            raise LayoutError(f"{program.path}: an embedding program has one method, this has "
                              f"{sorted(program.methods)}")
        name, m = next(iter(program.methods.items()))
        inputs = {s.name: s for s in m.inputs}
        if IDS not in inputs or set(inputs) - {IDS, MASK, TYPES}:
            raise LayoutError(f"{program.path}: expected inputs {IDS} [1, S] (and {MASK}, {TYPES}), got "
                              f"{sorted(inputs)}")
        shape = tuple(inputs[IDS].shape)
        if len(shape) != 2 or shape[0] != 1 or not shape[1]:
            raise LayoutError(f"{program.path}: {IDS} has shape {shape}; a fixed [1, S] is needed")
        if len(m.outputs) != 1 or len(m.outputs[0].shape) != 2 or m.outputs[0].shape[0] != 1:
            raise LayoutError(f"{program.path}: expected one output, a sentence embedding [1, D], got "
                              f"{[(s.name, s.shape) for s in m.outputs]}")
        out = m.outputs[0]
        return cls(name, int(shape[1]), int(out.shape[1]), out.name,
                   {n: np.dtype(s.dtype) for n, s in inputs.items()})


@dataclass(frozen=True)
class Embedding:
    vector: np.ndarray                 # float32 [D]
    tokens: int                        # tokens of the text that were embedded (after truncation)


class EmbeddingModel:
    """A loaded embedding program and its tokenizer (the HTTP side never touches either: the
    engine thread calls ``embed``)."""

    def __init__(self, program: Any, tokenizer: TextTokenizer):
        self.program = program
        self.layout = EmbeddingLayout.of(program)
        self.tokenizer = tokenizer
        self._tok = type(tokenizer.tokenizer).from_str(tokenizer.tokenizer.to_str())   # padded, truncated: a copy
        self._tok.enable_truncation(self.layout.seq_len)
        pad = tokenizer.special_tokens.get("pad_token")
        pad_id = tokenizer.token_id(pad) if pad else None
        self._tok.enable_padding(length=self.layout.seq_len, pad_id=pad_id or 0, pad_token=pad or "[PAD]")

    def inputs(self, text: str) -> tuple[dict[str, np.ndarray], int]:
        """The program's inputs for ``text`` and how many of its tokens they hold."""
        try:
            enc = self._tok.encode(text, add_special_tokens=True)
        except Exception as e:  # noqa: BLE001 - the tokenizers package raises plain Exceptions
            raise TokenizerError(f"cannot tokenize the text: {e}") from None
        values = {IDS: enc.ids, MASK: enc.attention_mask, TYPES: enc.type_ids}
        feed = {name: np.asarray([values[name]]).astype(dtype) for name, dtype in self.layout.input_dtypes.items()}
        return feed, int(sum(enc.attention_mask))

    def embed(self, text: str) -> Embedding:
        feed, n = self.inputs(text)
        out = self.program.run(self.layout.method, feed)[self.layout.output]
        return Embedding(np.asarray(out, dtype=np.float32).reshape(-1), n)

    def embed_all(self, texts: Sequence[str]) -> list[Embedding]:
        """One run per text, in order (the program's batch is one)."""
        return [self.embed(t) for t in texts]
