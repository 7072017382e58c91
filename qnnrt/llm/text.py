"""Text in, text out: a Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json,
chat_template.jinja, generation_config.json, as model folders ship them) read with the `tokenizers`
package; BOS / EOS / stop ids from it and from the .pte's constant methods."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from qnnrt.errors import FormatError
from qnnrt.fileio import read_json, read_text
from qnnrt.install import extra_hint
from qnnrt.llm.errors import TokenizerError
from qnnrt.llm.layout import LlmLayout

INSTALL_HINT = extra_hint("llm", "tokenizers jinja2")


TOKENIZER_MAX_BYTES = 256 << 20    # tokenizer.json of the largest vocabularies is tens of MB


def _read_json(path: Path) -> dict[str, Any]:
    """A tokenizer folder's config file through qnnrt's one bounded JSON reader."""
    if not path.is_file():
        return {}
    try:
        data = read_json(path, path.name)
    except FormatError as e:
        raise TokenizerError(str(e)) from None
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: expected a JSON object")
    return data


def _token_text(value: Any) -> str | None:
    """tokenizer_config.json writes special tokens as strings or as AddedToken dicts."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _chat_template(folder: Path | None, base: Path, config: dict[str, Any]) -> tuple[str | None, str]:
    """chat_template.jinja wins over tokenizer_config.json's chat_template (string, or a list of
    named templates of which "default" is used); and where it came from, for errors."""
    if folder is not None and (folder / "chat_template.jinja").is_file():
        path = folder / "chat_template.jinja"
        try:
            return read_text(path, "chat template"), f"the chat template {path}"
        except FormatError as e:
            raise TokenizerError(str(e)) from None
    t = config.get("chat_template")
    if isinstance(t, list):
        named = {d.get("name"): d.get("template") for d in t if isinstance(d, dict)}
        t = named.get("default")
    return (t if isinstance(t, str) else None), f"the chat template of {base / 'tokenizer_config.json'}"


@dataclass
class TextTokenizer:
    """Encode / decode with a `tokenizers.Tokenizer`; the special tokens and chat template of its
    folder."""
    tokenizer: Any
    source: str
    special_tokens: dict[str, str] = field(default_factory=dict)   # bos_token, eos_token, ... -> text
    chat_template: str | None = None
    eos_ids: list[int] = field(default_factory=list)               # config + generation_config
    template_source: str = "the chat template"                     # where it came from (in its errors)

    @classmethod
    def from_path(cls, path: str | Path) -> TextTokenizer:
        """A tokenizer.json, or a folder holding one (and perhaps its config files)."""
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise TokenizerError(f"text needs the `tokenizers` package: {INSTALL_HINT}") from None
        p = Path(path)
        folder = p if p.is_dir() else None
        file = p / "tokenizer.json" if folder else p
        if not file.is_file():
            raise TokenizerError(f"{path}: no tokenizer.json there (give a Hugging Face tokenizer "
                                 f"folder or its tokenizer.json)")
        try:
            tok = Tokenizer.from_str(read_text(file, "tokenizer", TOKENIZER_MAX_BYTES))
        except FormatError as e:
            raise TokenizerError(str(e)) from None
        except Exception as e:  # noqa: BLE001 - the tokenizers package raises plain Exceptions
            raise TokenizerError(f"{file}: not a Hugging Face tokenizer ({e})") from None
        base = folder or file.parent
        config = _read_json(base / "tokenizer_config.json")
        specials = {k: t for k in ("bos_token", "eos_token", "unk_token", "pad_token")
                    if (t := _token_text(config.get(k))) is not None}
        template, where = _chat_template(folder or base, base, config)
        self = cls(tok, str(file), specials, template, template_source=where)
        self.eos_ids = self._config_eos_ids(_read_json(base / "generation_config.json"))
        return self

    def _config_eos_ids(self, generation_config: dict[str, Any]) -> list[int]:
        ids = []
        if "eos_token" in self.special_tokens:
            t = self.token_id(self.special_tokens["eos_token"])
            if t is not None:
                ids.append(t)
        g = generation_config.get("eos_token_id")
        for t in g if isinstance(g, list) else [g]:
            if isinstance(t, int) and not isinstance(t, bool) and t not in ids:
                ids.append(t)
        return ids

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    def token_id(self, text: str) -> int | None:
        t = self.tokenizer.token_to_id(text)
        return None if t is None else int(t)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` as written (special tokens in it are recognised; none are added)."""
        try:
            return list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        except Exception as e:  # noqa: BLE001 - the tokenizers package raises plain Exceptions
            raise TokenizerError(f"cannot tokenize the text: {e}") from None

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return str(self.tokenizer.decode([int(t) for t in ids], skip_special_tokens=skip_special_tokens))

    def token_texts(self, ids: Sequence[int]) -> list[str]:
        """Each id decoded alone (what OpenAI's logprobs call a token)."""
        return [self.decode([t], skip_special_tokens=False) for t in ids]


@dataclass(frozen=True)
class TextModel:
    """What text generation needs from the model and its tokenizer together: the BOS rule and the
    stop ids, one definition for `qnnrt llm` and `qnnrt serve`."""
    tokenizer: TextTokenizer
    bos_id: int | None
    n_bos: int
    stop_ids: tuple[int, ...]
    vocab_size: int

    @classmethod
    def of(cls, tokenizer: TextTokenizer, layout: LlmLayout) -> TextModel:
        if tokenizer.vocab_size > layout.vocab_size:
            raise TokenizerError(f"{tokenizer.source}: {tokenizer.vocab_size} tokens, more than the model's "
                                 f"vocabulary of {layout.vocab_size}: not this model's tokenizer")
        stops = sorted(layout.eos_ids)
        stops += [t for t in tokenizer.eos_ids if t not in stops]
        return cls(tokenizer, layout.bos_id, max(1, layout.n_bos), tuple(stops), layout.vocab_size)

    def prompt_ids(self, text: str) -> list[int]:
        """The model's BOS (get_bos_id, get_n_bos times) then the text's ids, unless the text
        already starts with BOS (a chat template that writes it)."""
        ids = self.tokenizer.encode(text)
        if self.bos_id is not None and (not ids or ids[0] != self.bos_id):
            ids = [self.bos_id] * self.n_bos + ids
        return ids
