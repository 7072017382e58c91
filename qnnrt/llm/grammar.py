"""Constrained decoding with llguidance (the grammar library llama.cpp, vLLM and SGLang use): a JSON
schema or a Lark grammar becomes a matcher that masks, before every token, the tokens that cannot
continue a valid output. llguidance was chosen over xgrammar because it reads the `tokenizers`
JSON we already load (no `transformers`), compiles a schema lazily (no per-schema warm-up), keeps the
mask within microseconds on a 49k vocabulary, and reports a schema it cannot compile as a message."""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator, Sequence

import numpy as np

from qnnrt.install import extra_hint
from qnnrt.llm.errors import GrammarError
from qnnrt.llm.text import TextTokenizer

INSTALL_HINT = extra_hint("serve", "llguidance")
# JSON as a small model should write it: no free whitespace (a model may otherwise fill its budget
# with it), OpenAI's separators
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _llg() -> Any:
    try:
        import llguidance
    except ImportError:
        raise GrammarError(f"structured output needs the `llguidance` package: {INSTALL_HINT}") from None
    return llguidance


@dataclass(frozen=True)
class Grammar:
    """A compiled-and-checked llguidance grammar for one tokenizer; ``matcher()`` starts a decode."""
    source: str
    compiler: GrammarCompiler

    def matcher(self) -> GrammarMatcher:
        return GrammarMatcher(self.compiler.new_matcher(self.source), self.compiler.vocab_size)


class GrammarMatcher:
    """One decode's grammar state: the TokenConstraint the sampler asks."""

    def __init__(self, matcher: Any, vocab_size: int):
        self._m = matcher
        self._words = np.full((vocab_size + 31) // 32, -1, dtype=np.int32)
        self._vocab = vocab_size

    def allowed(self, vocab_size: int) -> np.ndarray:
        self._m.unsafe_compute_mask_ptr(self._words.ctypes.data, self._words.nbytes)
        bits = np.unpackbits(self._words.view(np.uint8), bitorder="little")[:self._vocab].view(bool)
        if vocab_size == self._vocab:
            return bits
        out = np.zeros(vocab_size, dtype=bool)
        n = min(vocab_size, self._vocab)
        out[:n] = bits[:n]
        return out

    def accept(self, token: int) -> None:
        if not self._m.consume_token(int(token)):
            raise GrammarError(f"the grammar refused token {token}: {self._m.get_error()}")

    @property
    def accepting(self) -> bool:
        return bool(self._m.is_accepting())


class GrammarCompiler:
    """Grammars for one tokenizer and vocabulary; the stop ids end an accepted output."""

    def __init__(self, tokenizer: TextTokenizer, vocab_size: int, stop_ids: Sequence[int]):
        self.tokenizer, self.vocab_size, self.stop_ids = tokenizer, vocab_size, list(stop_ids)
        if not self.stop_ids:
            raise GrammarError("constrained decoding needs an end-of-sequence id (none in the model or tokenizer)")

    @cached_property
    def _lltokenizer(self) -> Any:
        """Built once (it walks the whole vocabulary), on the first grammar."""
        return _llg().LLTokenizer(self.tokenizer.tokenizer.to_str(), n_vocab=self.vocab_size,
                                  eos_token=self.stop_ids)

    def new_matcher(self, source: str) -> Any:
        m = _llg().LLMatcher(self._lltokenizer, source)
        if m.is_error():
            raise GrammarError(m.get_error())
        return m

    def _checked(self, source: str) -> Grammar:
        failed, messages = _llg().LLMatcher.validate_grammar_with_warnings(source, self._lltokenizer)
        if failed:
            raise GrammarError(messages[0] if messages else "the grammar does not compile")
        return Grammar(source, self)

    def json_schema(self, schema: dict[str, Any]) -> Grammar:
        """The grammar of JSON that validates against ``schema``; a GrammarError names the part of
        the schema (a JSON pointer) that does not compile."""
        try:
            return self._checked(self._schema_source(schema))
        except GrammarError as e:
            where = self._failing_part(schema, str(e))
            raise GrammarError(f"at {where or '/'}: {e}") from None

    def lark(self, text: str) -> Grammar:
        return self._checked(_llg().LLMatcher.grammar_from_lark(text))

    def _schema_source(self, schema: dict[str, Any]) -> str:
        try:
            return str(_llg().LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS))
        except (ValueError, TypeError) as e:
            raise GrammarError(str(e)) from None

    def _failing_part(self, schema: Any, message: str) -> str:
        """The deepest subschema that fails alone with the same message (its JSON pointer)."""
        for pointer, sub in _subschemas(schema):
            try:
                self._checked(self._schema_source(sub))
            except GrammarError as e:
                if str(e) == message:
                    return pointer + self._failing_part(sub, message)
        return ""


def _subschemas(schema: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(pointer, subschema) of the direct children that hold no $ref (they would not compile alone)."""
    if not isinstance(schema, dict):
        return
    children: list[tuple[str, Any]] = []
    for key in ("properties", "patternProperties", "$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            children += [(f"/{key}/{_escape(k)}", v) for k, v in schema[key].items()]
    for key in ("items", "additionalProperties", "not", "contains"):
        if isinstance(schema.get(key), dict):
            children.append((f"/{key}", schema[key]))
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(schema.get(key), list):
            children += [(f"/{key}/{i}", v) for i, v in enumerate(schema[key])]
    for pointer, sub in children:
        if isinstance(sub, dict) and '"$ref"' not in json.dumps(sub):
            yield pointer, sub


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
