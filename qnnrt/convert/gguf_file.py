"""A GGUF file (llama.cpp's format) read with the `gguf` package: its metadata mapped onto the
Hugging Face config keys the architectures read, its tensors memory-mapped and dequantized on read
(any type `gguf` dequantizes: F32, F16, BF16, Q8_0, Q4_K...). llama.cpp stores a Llama model's
Q and K rows permuted (its rotary layout); that permutation is undone here. The tokenizer is
rebuilt as a Hugging Face tokenizer.json that tokenizes as llama.cpp does (byte-level BPE for the
file's pre-tokenizer, or SentencePiece BPE; tools/check_gguf_tokenizers.py checks both against
llama.cpp's test vectors)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from qnnrt.convert import arch as registry
from qnnrt.convert.hf import TokenizerFiles
from qnnrt.convert.spec import CheckedWeights, ConvertError, ModelSpec
from qnnrt.formats.genie import RopeConfig, RopeScaling
from qnnrt.llm.rope import inverse_frequencies

STANDARD_LLAMA3 = (1.0, 4.0, 8192)   # low / high frequency factor, original context: every Llama 3.x


def _open(path: Path):
    try:
        import gguf
    except ImportError:
        raise ConvertError("reading a .gguf file needs the gguf package: pip install gguf") from None
    try:
        return gguf.GGUFReader(str(path), "r")
    except (ValueError, KeyError, IndexError, OSError, TypeError) as e:
        raise ConvertError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e}); the file is "
                           f"truncated or damaged, download it again") from None


def _fields(reader) -> dict:
    out = {}
    for name, f in reader.fields.items():
        try:
            out[name] = f.contents()
        except (ValueError, IndexError, UnicodeDecodeError):
            continue
    return out


def read_metadata(path: Path) -> dict:
    """The file's metadata, key -> value (values ``gguf`` cannot read are left out)."""
    return _fields(_open(path))


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row order ([out, in], rows per head interleaved in pairs) to Hugging Face's
    rotate-half order."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_config(meta: dict, arch: str, vocab: int, path: Path) -> dict:
    """The GGUF metadata as the Hugging Face config keys (llama.cpp's names per key)."""
    def key(k: str, default=None):
        return meta.get(f"{arch}.{k}", default)
    cfg = {"hidden_size": key("embedding_length"), "num_hidden_layers": key("block_count"),
           "num_attention_heads": key("attention.head_count"),
           "num_key_value_heads": key("attention.head_count_kv", key("attention.head_count")),
           "intermediate_size": key("feed_forward_length"),
           "rms_norm_eps": key("attention.layer_norm_rms_epsilon", 1e-6),
           "rope_theta": key("rope.freq_base", 10000.0), "max_position_embeddings": key("context_length", 2048),
           "vocab_size": vocab, "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
           "eos_token_id": meta.get("tokenizer.ggml.eos_token_id")}
    if key("attention.key_length") is not None:
        cfg["head_dim"] = key("attention.key_length")
    scaling = key("rope.scaling.type")
    if scaling not in (None, "none"):
        cfg["rope_scaling"] = {"rope_type": scaling, "factor": key("rope.scaling.factor"),
                               "original_max_position_embeddings": key("rope.scaling.original_context_length")}
    for k, v in cfg.items():
        if isinstance(v, list | tuple):
            raise ConvertError(f"{path}: {arch} metadata for {k} is per layer ({v!r}); qnnrt convert needs "
                               f"one value for every layer")
    return cfg


def llama3_from_rope_freqs(factors: np.ndarray, spec: ModelSpec, where: str) -> RopeScaling:
    """Llama 3's rope scaling from llama.cpp's ``rope_freqs.weight`` (what each frequency is divided
    by), which its converter writes instead of the config's rope_scaling. The factors depend only on
    the factor and original / low and original / high: Llama 3.x's own (1, 4, 8192) are tried first,
    then the values the factors' smooth band solves for; a tensor neither reproduces is refused, as
    is one that disagrees with the file's rope.scaling metadata."""
    dim = spec.head_dim // 2
    if factors.shape != (dim,) or not np.all(np.isfinite(factors)) or np.any(factors <= 0):
        raise ConvertError(f"{where}: {factors.size} values; {dim} positive factors (head_dim / 2) are needed")
    base = 1.0 / spec.rope_theta ** (np.arange(0, 2 * dim, 2, dtype=np.float64) / (2 * dim))
    factor = round(float(factors.max()), 4)   # float32 in the file: rounded as a config writes it
    candidates = [spec.rope_scaling] if spec.rope_scaling is not None else [
        RopeScaling("llama3", factor, *STANDARD_LLAMA3), *_solved_llama3(factors, base, factor)]
    for c in candidates:
        got = base / inverse_frequencies(RopeConfig(dim, spec.rope_theta, c))
        if np.allclose(got, factors, rtol=1e-4, atol=0):
            return c
    said = "the file's rope.scaling metadata" if spec.rope_scaling is not None else "Llama 3's rope scaling"
    raise ConvertError(f"{where}: the factors (from {factors.min():.4g} to {factor:.4g}) are not {said}; "
                       f"convert the model's Hugging Face folder instead")


def _solved_llama3(factors: np.ndarray, base: np.ndarray, factor: float) -> list[RopeScaling]:
    """The (low, high, original) the smooth band's factors solve for, low fixed at 1 (only the ratios
    original / low and original / high enter the factors)."""
    band = (factors > 1 + 1e-6) & (factors < factor * (1 - 1e-6))
    if factor <= 1 or band.sum() < 2:
        return []
    smooth = (1 / factors[band] - 1 / factor) / (1 - 1 / factor)      # 1 / f = (1 - s) / factor + s
    slope, intercept = np.polyfit(base[band] / (2 * np.pi), smooth, 1)  # s = a / wavelength - b
    if slope <= 0 or intercept >= 0:
        return []
    high = 1 - 1 / intercept          # float32 factors: rounded to what a config writes, checked after
    return [RopeScaling("llama3", factor, 1.0, round(float(high), 4), int(round(slope * (high - 1))))]


class GgufTensors:
    """Canonical weights from the file's tensors (dequantized to float32, [in, out] projections)."""

    def __init__(self, path: Path, reader, spec: ModelSpec, permuted: bool) -> None:
        self.path, self.spec, self.permuted = path, spec, permuted
        self.tensors = {t.name: t for t in reader.tensors}

    def where(self, canonical: str) -> str:
        return f"{self.path}: tensor {registry.gguf_name(canonical)[0]!r}"

    def get(self, canonical: str) -> np.ndarray:
        import gguf
        name, transposed = registry.gguf_name(canonical)
        t = self.tensors.get(name)
        if t is None:
            raise ConvertError(f"{self.path}: tensor {name!r} ({canonical}) is missing; the file is "
                               f"incomplete or not of the architecture its metadata names")
        try:
            w = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32, copy=False)
        except (NotImplementedError, ValueError) as e:
            raise ConvertError(f"{self.where(canonical)}: cannot dequantize {t.tensor_type.name} ({e})") from None
        shape = tuple(int(x) for x in reversed(t.shape))      # GGUF lists dims innermost first
        if w.size != int(np.prod(shape)):
            raise ConvertError(f"{self.where(canonical)}: {w.size} values for shape {list(shape)}")
        w = w.reshape(shape)
        what = canonical.split(".")[-1]
        if self.permuted and what in ("wq", "wk"):
            w = unpermute(w, self.spec.heads if what == "wq" else self.spec.kv_heads)
        return np.ascontiguousarray(w.T) if transposed else w


# llama.cpp's pre-tokenizer names (tokenizer.ggml.pre) -> how the text is split before byte-level BPE:
# GPT-2's regex (ByteLevel's own), digits one by one first, or the regex of the model's tokenizer.json
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_PRE_SPLIT = {"default": None, "gpt-2": None, "gpt2": None, "smollm": "digits", "starcoder": "digits",
              "refact": "digits", "llama-bpe": _LLAMA3_SPLIT, "llama3": _LLAMA3_SPLIT,
              "qwen2": _LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")}

_WHOLE_WORDS = ("llama-bpe", "llama3")     # a piece in the vocabulary is one token, merges or not (Llama 3)


def _pre_tokenizer(meta: dict, path: Path):
    from tokenizers import Regex, pre_tokenizers
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in _PRE_SPLIT:
        raise ConvertError(f"{path}: tokenizer.ggml.pre is {pre!r}; qnnrt convert rebuilds the pre-tokenizers "
                           f"{', '.join(sorted(_PRE_SPLIT))}; pass tokenizer=... (--tokenizer) with the model's "
                           f"tokenizer.json")
    split = _PRE_SPLIT[pre]
    if split is None:
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if split == "digits":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def tokenizer_json(meta: dict, path: Path) -> str:
    """A Hugging Face tokenizer.json that tokenizes as llama.cpp does: byte-level BPE
    (tokenizer.ggml.model 'gpt2') split for the file's pre-tokenizer (tokenizer.ggml.pre), or
    SentencePiece's BPE ('llama': Llama 2, TinyLlama, Phi-3...) merged by the pieces' scores."""
    model = meta.get("tokenizer.ggml.model")
    if model not in ("gpt2", "llama"):
        raise ConvertError(f"{path}: tokenizer.ggml.model is {model!r}; qnnrt convert rebuilds byte-level BPE "
                           f"('gpt2') and SentencePiece BPE ('llama') tokenizers; pass tokenizer=... (--tokenizer) "
                           f"with the model's tokenizer.json")
    from tokenizers import AddedToken
    tokens = list(meta.get("tokenizer.ggml.tokens") or [])
    types = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))
    tok = _byte_level(meta, path, tokens) if model == "gpt2" else _sentencepiece(meta, tokens)
    special = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty in (3, 4)]
    tok.add_special_tokens(special)
    bos = meta.get("tokenizer.ggml.bos_token_id")
    if meta.get("tokenizer.ggml.add_bos_token") is True and isinstance(bos, int) and 0 <= bos < len(tokens):
        from tokenizers import processors
        tok.post_processor = processors.TemplateProcessing(single=f"{tokens[bos]} $A",
                                                           special_tokens=[(tokens[bos], bos)])
    return tok.to_str()


def _byte_level(meta: dict, path: Path, tokens: list[str]):
    from tokenizers import Tokenizer, decoders, models
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    pre = meta.get("tokenizer.ggml.pre", "default")
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False,
                               ignore_merges=pre in _WHOLE_WORDS))
    tok.pre_tokenizer = _pre_tokenizer(meta, path)
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece(meta: dict, tokens: list[str]):
    """SentencePiece BPE as llama.cpp runs it: spaces as '▁' (one added in front unless the file says
    not), then the adjacent pair whose joined piece scores highest merged first, unknown characters
    as <0xNN> byte pieces. As BPE merges: every split of every piece into two pieces, ranked by the
    joined piece's score."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    scores = list(meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens))
    vocab = {t: i for i, t in enumerate(tokens)}
    ranked: list[tuple[float, int, int, str, str]] = []
    for piece, score in zip(tokens, scores):
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                ranked.append((-score, vocab[left], vocab[right], left, right))
    ranked.sort(key=lambda m: m[0])             # stable: a piece's own splits stay in id order
    unk = meta.get("tokenizer.ggml.unknown_token_id", 0)
    tok = Tokenizer(models.BPE(vocab, [(m[3], m[4]) for m in ranked], unk_token=tokens[unk], fuse_unk=True,
                               byte_fallback=True))
    prefix = meta.get("tokenizer.ggml.add_space_prefix", True) is not False
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581")] * prefix
                                          + [normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
                                    + [decoders.Strip(" ", 1, 0)] * prefix)
    return tok


def read_gguf(path: Path, tokenizer: Path | None = None) -> tuple[ModelSpec, CheckedWeights, TokenizerFiles]:
    """The file's spec, checked weights and tokenizer (``tokenizer``: a tokenizer.json to use instead)."""
    reader = _open(path)
    meta = _fields(reader)
    name = meta.get("general.architecture")
    if not isinstance(name, str):
        raise ConvertError(f"{path}: no general.architecture in the GGUF metadata")
    a = registry.by_gguf(name, str(path))
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embed is None:
        raise ConvertError(f"{path}: tensor 'token_embd.weight' is missing")
    vocab = int(embed.shape[-1])
    spec = a.spec(hf_config(meta, name, vocab, path), f"{path} ({name} metadata)")
    if not any(t.name == "output.weight" for t in reader.tensors) and not spec.tied:
        spec = dataclasses.replace(spec, tied=True)           # llama.cpp drops a tied lm head
    elif any(t.name == "output.weight" for t in reader.tensors) and spec.tied:
        spec = dataclasses.replace(spec, tied=False)
    freqs = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
    if freqs is not None:
        spec = dataclasses.replace(spec, rope_scaling=llama3_from_rope_freqs(
            np.asarray(freqs.data, dtype=np.float64).reshape(-1), spec, f"{path}: tensor 'rope_freqs.weight'"))
    tensors = GgufTensors(path, reader, spec, a.gguf_permuted)
    text = tokenizer.read_text(encoding="utf-8") if tokenizer is not None else tokenizer_json(meta, path)
    template = meta.get("tokenizer.chat_template")
    return spec, CheckedWeights(spec, tensors, tensors.where), TokenizerFiles(
        text, template if isinstance(template, str) else None, {}, {})
