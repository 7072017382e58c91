"""What `qnnrt convert` reads, whatever its form: a Hugging Face folder or a GGUF file, as one
`Source` (the spec, checked weights, tokenizer files, the files whose hash names the source)."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from qnnrt.convert.hf import TokenizerFiles
from qnnrt.convert.spec import CheckedWeights, ConvertError, ModelSpec


@dataclass(frozen=True)
class Source:
    path: Path
    kind: str                  # "hf" or "gguf"
    spec: ModelSpec
    weights: CheckedWeights
    tokenizer: TokenizerFiles
    files: tuple[Path, ...]    # the weight files, hashed into the record and the part cache keys

    def sha256(self) -> str:
        """One hash over the weight files' bytes (their names sorted)."""
        h = hashlib.sha256()
        for f in sorted(self.files):
            h.update(f.name.encode() + b"\0")
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    h.update(block)
        return h.hexdigest()


def open_model(path: str | os.PathLike[str], tokenizer: str | os.PathLike[str] | None = None) -> Source:
    """The model at ``path`` (a Hugging Face folder or a .gguf file); ``tokenizer``: a tokenizer.json
    (or folder holding one) to use instead of the model's."""
    p = Path(path)
    tok = Path(tokenizer) if tokenizer is not None else None
    if tok is not None and tok.is_dir():
        tok = tok / "tokenizer.json"
    if tok is not None and not tok.is_file():
        raise ConvertError(f"--tokenizer {tokenizer}: no tokenizer.json there")
    if p.is_dir():
        from qnnrt.convert.hf import read_hf
        spec, weights, files = read_hf(p)
        if tok is not None:
            files = TokenizerFiles(tok.read_text(encoding="utf-8"), files.chat_template, files.tokenizer_config,
                                   files.generation)
        store = weights.store
        paths = tuple(sorted({f.path for f in store.where_of.values()}))  # type: ignore[attr-defined]
        return Source(p, "hf", spec, weights, files, paths)
    if p.is_file():
        with open(p, "rb") as f:
            magic = f.read(4)
        if magic != b"GGUF":
            raise ConvertError(f"{p}: not a GGUF file (it starts with {magic!r}, not b'GGUF'); give a .gguf file "
                               f"or a Hugging Face model folder")
        from qnnrt.convert.gguf_file import read_gguf
        spec, weights, files = read_gguf(p, tok)
        return Source(p, "gguf", spec, weights, files, (p,))
    raise ConvertError(f"{p}: no such file or folder; give a Hugging Face model folder or a .gguf file")
