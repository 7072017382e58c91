"""Check the tokenizers `qnnrt convert` rebuilds from GGUF files against llama.cpp's own test vectors.

llama.cpp keeps vocabulary-only GGUF files with inputs and the token ids its tokenizer gives
(models/ggml-vocab-NAME.gguf, .inp, .out); the llama-cpp-python source distribution on PyPI carries
them. For each vocabulary this rebuilds the Hugging Face tokenizer as convert does
(qnnrt/convert/gguf_file.py) and encodes every input without special tokens:

    python tools/check_gguf_tokenizers.py WORK [--version 0.3.36]

WORK keeps the download. Prints one line per vocabulary (equal / mismatched / refused with the reason);
exits 1 when a vocabulary qnnrt rebuilds gives other ids than llama.cpp, or other text back."""
from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SEPARATOR = "\n__ggml_vocab_test__\n"


def fetch(work: Path, version: str) -> Path:
    """llama.cpp's models/ folder from the llama-cpp-python sdist (downloaded once into ``work``)."""
    models = work / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp" / "models"
    if models.is_dir():
        return models
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}", "--no-deps",
                    "--no-binary", ":all:", "-d", str(work)], check=True)
    with tarfile.open(work / f"llama_cpp_python-{version}.tar.gz") as tar:
        tar.extractall(work, members=[m for m in tar.getmembers() if "/models/ggml-vocab-" in m.name],
                       filter="data")
    return models


def check(vocab: Path) -> tuple[str, int, int]:
    """(what happened, inputs equal, inputs) for one vocabulary file with its .inp / .out."""
    from tokenizers import Tokenizer

    from qnnrt.convert.gguf_file import read_metadata, tokenizer_json
    from qnnrt.convert.spec import ConvertError
    meta = read_metadata(vocab)
    try:
        tok = Tokenizer.from_str(tokenizer_json(meta, vocab))
    except ConvertError as e:
        return f"refused: {str(e).split(': ', 1)[1]}", 0, 0
    texts = vocab.with_name(vocab.name + ".inp").read_text(encoding="utf-8").split(SEPARATOR)
    wanted = vocab.with_name(vocab.name + ".out").read_text(encoding="utf-8").split("\n")
    equal = sum(tok.encode(t, add_special_tokens=False).ids == [int(x) for x in w.split()]
                for t, w in zip(texts, wanted))
    back = sum(tok.decode([int(x) for x in w.split()]) == t for t, w in zip(texts, wanted))
    what = "equal" if equal == back == len(texts) else "MISMATCH"
    return f"{what}, decoded back {back}/{len(texts)}", equal, len(texts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--version", default="0.3.36")
    args = ap.parse_args()
    bad = 0
    for vocab in sorted(fetch(args.work, args.version).glob("ggml-vocab-*.gguf")):
        if not vocab.with_name(vocab.name + ".out").is_file():
            continue
        what, equal, n = check(vocab)
        bad += what.startswith("MISMATCH")
        print(f"{vocab.name}: {what}" + (f" ({equal}/{n} inputs)" if n else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
