"""Sentence embeddings from a program compiled at a fixed sequence length: all-MiniLM-L6-v2's ONNX
export built with `qnnrt build`, or a .pte as ExecuTorch writes one (no input names, token
embeddings out), or an EPContext model of the same shape. Text is tokenized with the model's own
tokenizer folder (its special tokens added, as sentence-transformers does), padded or truncated to
the program's sequence, one run per text; a program that outputs token embeddings is pooled as the
folder's sentence-transformers modules say (modules.json, 1_Pooling/config.json)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from qnnrt.errors import FormatError
from qnnrt.fileio import read_json
from qnnrt.llm.errors import ContextLengthError, LayoutError, TokenizerError
from qnnrt.llm.text import TextTokenizer

IDS, MASK, TYPES = "input_ids", "attention_mask", "token_type_ids"
ROLES = (IDS, MASK, TYPES)     # the order BERT-like models' forward takes them
POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len")


@dataclass(frozen=True)
class Pooling:
    """How token embeddings [S, D] become one vector: `mode` over the unmasked positions, then
    L2-normalized when `normalize`; `source` says where the choice came from."""
    mode: str = "mean"
    normalize: bool = False
    source: str = "default: the tokenizer folder has no sentence-transformers pooling config"

    @classmethod
    def of_folder(cls, folder: str | Path | None) -> Pooling:
        """The pooling a sentence-transformers folder declares (modules.json and its Pooling
        module's config.json), else the default (mean, not normalized)."""
        root = Path(folder) if folder is not None else None
        if root is None or not root.is_dir():
            return cls()
        modules = _json(root / "modules.json")
        if not isinstance(modules, list):
            return cls()
        kinds = {str(m.get("type", "")).rsplit(".", 1)[-1]: m for m in modules if isinstance(m, dict)}
        normalize = "Normalize" in kinds
        if "Pooling" not in kinds:
            return cls(normalize=normalize, source=f"{root / 'modules.json'} (no Pooling module: mean)")
        config_path = root / str(kinds["Pooling"].get("path", "")) / "config.json"
        config = _json(config_path)
        if not isinstance(config, dict):
            raise LayoutError(f"{config_path}: the Pooling module's config is missing or not a JSON object")
        chosen = [m for m in POOLING_MODES if config.get(f"pooling_mode_{m}_token" if m == "cls"
                                                            else f"pooling_mode_{m}_tokens")]
        if len(chosen) != 1:
            raise LayoutError(f"{config_path}: qnnrt pools with exactly one of {list(POOLING_MODES)}; "
                              f"this config asks for {chosen or 'none'}")
        return cls(chosen[0], normalize, str(config_path))

    def __call__(self, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """One vector from `tokens` [S, D] and `mask` [S] (1 where a token is)."""
        m = mask.astype(np.float32)[:, None]
        count = max(float(m.sum()), 1e-9)
        if self.mode == "cls":
            v = tokens[0]
        elif self.mode == "max":
            v = np.where(m > 0, tokens, -1e9).max(axis=0)
        else:
            v = (tokens * m).sum(axis=0) / (count if self.mode == "mean" else np.sqrt(count))
        v = np.asarray(v, dtype=np.float32)
        if self.normalize:
            v = v / max(float(np.linalg.norm(v)), 1e-12)
        return v


def _json(path: Path) -> Any:
    """A sentence-transformers config file through qnnrt's one bounded JSON reader (None: absent)."""
    if not path.exists():
        return None
    try:
        return read_json(path, path.name)
    except FormatError as e:
        raise LayoutError(str(e)) from None


@dataclass(frozen=True)
class EmbeddingLayout:
    """Which method the program has, which of its inputs is which (`feeds`: program input name ->
    role, in the method's order), its sequence and vector sizes, and whether its output holds token
    embeddings [1, S, D] (pooled here) or the sentence vector [1, D]."""
    method: str
    seq_len: int
    dim: int
    output: str
    feeds: tuple[tuple[str, str], ...]
    input_dtypes: dict[str, np.dtype]
    token_output: bool

    @classmethod
    def of(cls, program: Any, input_roles: Sequence[str] | None = None) -> EmbeddingLayout:
        """`input_roles`: what each of the method's inputs is, in order (`--embeddings-inputs`);
        without it, inputs named input_ids / attention_mask / token_type_ids are taken by name,
        and inputs without those names (a .pte keeps none) by position, in that order."""
        if len(program.methods) != 1:
            raise LayoutError(f"{program.path}: an embedding program has one method, this has "
                              f"{sorted(program.methods)}")
        name, m = next(iter(program.methods.items()))
        specs = list(m.inputs)
        feeds = _roles(program.path, specs, input_roles)
        ids = next(s for s, (_, role) in zip(specs, feeds) if role == IDS)
        shape = tuple(ids.shape)
        if len(shape) != 2 or shape[0] != 1 or not shape[1]:
            raise LayoutError(f"{program.path}: {IDS} ({ids.name}) has shape {list(shape)}; a fixed [1, S] is needed")
        seq = int(shape[1])
        for s, (_, role) in zip(specs, feeds):
            if tuple(s.shape) != shape:
                raise LayoutError(f"{program.path}: {role} ({s.name}) has shape {list(s.shape)}, "
                                  f"{IDS} has {list(shape)}: they must match")
        output, token_output, dim = _output(program.path, list(m.outputs), seq)
        return cls(name, seq, dim, output, feeds, {s.name: np.dtype(s.dtype) for s in specs}, token_output)


def _roles(path: Any, specs: list, given: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    names = [s.name for s in specs]
    wanted = f"inputs {IDS} [1, S] (and {MASK}, {TYPES})"
    if given is not None:
        roles = list(given)
        if len(roles) != len(specs) or set(roles) - set(ROLES) or len(set(roles)) != len(roles) \
                or IDS not in roles:
            raise LayoutError(f"{path}: --embeddings-inputs {','.join(roles)} does not fit the program's "
                              f"inputs {names}: name each of its {len(specs)} inputs once, in order, from "
                              f"{', '.join(ROLES)}")
    elif IDS in names and not set(names) - set(ROLES):
        roles = names
    elif 1 <= len(specs) <= len(ROLES) and not set(names) & set(ROLES) \
            and np.issubdtype(np.dtype(specs[0].dtype), np.integer):
        roles = list(ROLES[:len(specs)])
    else:
        raise LayoutError(f"{path}: expected {wanted} by name, or 1 to 3 unnamed inputs in that order "
                          f"starting with integer ids; got {names}. Say which is which with "
                          f"--embeddings-inputs, e.g. --embeddings-inputs {','.join(ROLES[:len(specs)])}")
    return tuple(zip(names, roles))


def _output(path: Any, outs: list, seq: int) -> tuple[str, bool, int]:
    """(name, holds token embeddings, D) of the output the vectors come from: token embeddings
    [1, S, D] where the program has them (sentence-transformers pools those), else its one [1, D]."""
    tokens = [o for o in outs if len(o.shape) == 3 and o.shape[0] == 1 and o.shape[1] == seq]
    vectors = [o for o in outs if len(o.shape) == 2 and o.shape[0] == 1]
    if tokens:
        return tokens[0].name, True, int(tokens[0].shape[2])
    if len(vectors) == 1:
        return vectors[0].name, False, int(vectors[0].shape[1])
    raise LayoutError(f"{path}: expected token embeddings [1, {seq}, D] or one sentence embedding [1, D] "
                      f"out, got {[(o.name, list(o.shape)) for o in outs]}")


@dataclass(frozen=True)
class Embedding:
    vector: np.ndarray                 # float32 [D]
    tokens: int                        # tokens of the text that were embedded (after truncation)


@dataclass(frozen=True)
class EmbedInput:
    """One input as the program takes it (padded to its sequence): prepared off the thread that runs
    the program (serve: the preparing threads)."""
    ids: list[int]
    mask: list[int]
    types: list[int]
    tokens: int                        # the real (unpadded) ones


class EmbeddingModel:
    """A loaded embedding program and its tokenizer (the HTTP side never touches either: the
    engine thread calls ``embed``)."""

    def __init__(self, program: Any, tokenizer: TextTokenizer, pooling: Pooling | None = None,
                 input_roles: Sequence[str] | None = None):
        self.program = program
        self.layout = EmbeddingLayout.of(program, input_roles)
        self.pooling = pooling or Pooling()
        self.tokenizer = tokenizer
        self._tok = type(tokenizer.tokenizer).from_str(tokenizer.tokenizer.to_str())   # padded, truncated: a copy
        self._tok.enable_truncation(self.layout.seq_len)
        pad = tokenizer.special_tokens.get("pad_token")
        pad_id = tokenizer.token_id(pad) if pad else None
        self._tok.enable_padding(length=self.layout.seq_len, pad_id=pad_id or 0, pad_token=pad or "[PAD]")
        self._pad_id = pad_id or 0
        self._specials = self._special_ids()

    def describe(self) -> dict[str, Any]:
        lay = self.layout
        out = {"seq_len": lay.seq_len, "dim": lay.dim, "inputs": dict(lay.feeds), "output": lay.output}
        if lay.token_output:
            p = self.pooling
            out["pooling"] = {"mode": p.mode, "normalize": p.normalize, "from": p.source}
        return out

    def prepare(self, item: str | Sequence[int], truncate: bool = True, where: str = "the input") -> EmbedInput:
        """``item`` (a text, or token ids without special tokens) as the program's sequence: the
        special tokens added, padded; longer than the sequence is a ContextLengthError naming
        ``where`` unless ``truncate``."""
        seq = self.layout.seq_len
        if isinstance(item, str):
            try:
                enc = self._tok.encode(item, add_special_tokens=True)
                if enc.overflowing and not truncate:
                    n = len(self.tokenizer.tokenizer.encode(item, add_special_tokens=True).ids)
                    raise ContextLengthError(f"{where}: {n} tokens, more than the embedding model's sequence of "
                                             f"{seq}: send shorter input, or \"truncate\": true to cut it")
            except ContextLengthError:
                raise
            except Exception as e:  # noqa: BLE001 - the tokenizers package raises plain Exceptions
                raise TokenizerError(f"{where}: cannot tokenize the text: {e}") from None
            return EmbedInput(list(enc.ids), list(enc.attention_mask), list(enc.type_ids),
                              int(sum(enc.attention_mask)))
        head, tail = self._specials
        ids = [int(t) for t in item]
        vocab = self.tokenizer.vocab_size
        if any(not 0 <= t < vocab for t in ids):
            raise TokenizerError(f"{where}: token id(s) outside the embedding model's vocabulary of {vocab}")
        room = seq - len(head) - len(tail)
        if len(ids) > room:
            if not truncate:
                raise ContextLengthError(f"{where}: {len(ids) + len(head) + len(tail)} tokens with the special "
                                         f"ones, more than the embedding model's sequence of {seq}: send shorter "
                                         f"input, or \"truncate\": true to cut it")
            ids = ids[:max(room, 0)]
        full = (head + ids + tail)[:seq]
        pad = seq - len(full)
        return EmbedInput(full + [self._pad_id] * pad, [1] * len(full) + [0] * pad, [0] * seq, len(full))

    def _special_ids(self) -> tuple[list[int], list[int]]:
        """The ids the tokenizer adds before and after a text's own (BERT: [CLS], [SEP])."""
        tok = self.tokenizer.tokenizer
        plain = list(tok.encode("a", add_special_tokens=False).ids)
        full = list(tok.encode("a", add_special_tokens=True).ids)
        for i in range(len(full) - len(plain) + 1):
            if full[i:i + len(plain)] == plain:
                return full[:i], full[i + len(plain):]
        return [], []

    def _feed(self, inp: EmbedInput) -> dict[str, np.ndarray]:
        values = {IDS: inp.ids, MASK: inp.mask, TYPES: inp.types}
        dtypes = self.layout.input_dtypes
        return {name: np.asarray([values[role]]).astype(dtypes[name]) for name, role in self.layout.feeds}

    def inputs(self, text: str) -> tuple[dict[str, np.ndarray], int]:
        """The program's inputs for ``text`` (truncated) and how many of its tokens they hold."""
        inp = self.prepare(text)
        return self._feed(inp), inp.tokens

    def run(self, inp: EmbedInput) -> Embedding:
        """One run of the program on a prepared input."""
        lay = self.layout
        out = np.asarray(self.program.run(lay.method, self._feed(inp))[lay.output], dtype=np.float32)
        vector = self.pooling(out[0], np.asarray(inp.mask)) if lay.token_output else out.reshape(-1)
        return Embedding(vector, inp.tokens)

    def embed(self, text: str) -> Embedding:
        return self.run(self.prepare(text))

    def embed_all(self, texts: Sequence[str]) -> list[Embedding]:
        """One run per text, in order (the program's batch is one)."""
        return [self.embed(t) for t in texts]
