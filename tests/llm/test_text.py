"""Text in, text out on a real Hugging Face tokenizer folder (SmolLM2's): the chat template rendered
as `transformers` renders it (references made by tools/make_chat_template_refs.py), incremental
detokenization that never splits a character, stop strings held back until decided."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("tokenizers", reason="text needs the `tokenizers` package (pip install -e '.[llm]')")
pytest.importorskip("jinja2", reason="chat templates need `jinja2` (pip install -e '.[llm]')")

from qnnrt.llm.chat_template import render_chat
from qnnrt.llm.detokenize import REPLACEMENT, IncrementalDetokenizer, StopMatcher
from qnnrt.llm.errors import ChatTemplateError, TokenizerError
from qnnrt.llm.text import TextTokenizer
from tests.helpers.data import CHAT_TEMPLATE_REFS, SMOLLM2_TOKENIZER

FOLDER = SMOLLM2_TOKENIZER
REFS = json.loads(CHAT_TEMPLATE_REFS.read_text())


@pytest.fixture(scope="module")
def tok() -> TextTokenizer:
    return TextTokenizer.from_path(FOLDER)


def _template(tok: TextTokenizer, name: str) -> str:
    return tok.chat_template if name == "folder" else REFS["templates"][name]


@pytest.mark.parametrize("case", REFS["cases"], ids=lambda c: f"{c['template']}-{c['conversation']}-"
                                                              f"{int(c['add_generation_prompt'])}")
def test_chat_template_renders_and_tokenizes_as_transformers(tok, case):
    messages = REFS["conversations"][case["conversation"]]
    text = render_chat(_template(tok, case["template"]), messages, special_tokens=tok.special_tokens,
                       add_generation_prompt=case["add_generation_prompt"])
    assert text == case["text"]
    assert tok.encode(text) == case["ids"]


def test_folder_files_are_read(tok):
    assert tok.chat_template is not None and tok.chat_template.startswith("{% for message in messages %}")
    assert tok.special_tokens["bos_token"] == "<|im_start|>" and tok.eos_ids == [2]
    assert tok.token_id("<|im_end|>") == 2 and tok.vocab_size == 49152


def test_template_raise_exception_and_sandbox_are_errors(tok):
    ref = REFS["refused"]
    with pytest.raises(ChatTemplateError, match=ref["message"]):
        render_chat(REFS["templates"]["llama3_like"], ref["messages"], special_tokens=tok.special_tokens)
    escape = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(ChatTemplateError):
        render_chat(escape, [{"role": "user", "content": "x"}], special_tokens={})
    with pytest.raises(ChatTemplateError, match="namespace"):
        render_chat("{% set ns = namespace(_x=1) %}", [], special_tokens={})
    with pytest.raises(ChatTemplateError, match="does not compile"):
        render_chat("{% for m in messages %}", [], special_tokens={})
    with pytest.raises(ChatTemplateError, match="no chat template"):
        render_chat(None, [{"role": "user", "content": "x"}], special_tokens={})


def test_tokenizer_path_errors(tmp_path):
    with pytest.raises(TokenizerError, match="no tokenizer.json"):
        TextTokenizer.from_path(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="not a Hugging Face tokenizer"):
        TextTokenizer.from_path(tmp_path)


TEXTS = ["Grüße aus 東京 🐈‍⬛ und «Köln» — ok", "emoji 👩‍👩‍👧‍👦 family, 한국어 텍스트, Ελληνικά",
         "  spaces\n\nand\ttabs  ", "plain ascii words, 123 456"]


@pytest.mark.parametrize("text", TEXTS)
def test_incremental_detokenizer_streams_whole_characters(tok, text):
    ids = tok.encode(text)
    d = IncrementalDetokenizer(tok.decode)
    chunks = [d.add(t) for t in ids] + [d.flush()]
    assert "".join(chunks) == tok.decode(ids) == text
    assert not any(REPLACEMENT in c for c in chunks)


def test_a_character_split_over_tokens_is_held_then_released(tok):
    ids = tok.encode("🐈")
    assert len(ids) > 1 and REPLACEMENT in tok.decode(ids[:1])   # byte tokens of one character
    d = IncrementalDetokenizer(tok.decode, context=tok.encode("a cat: "))
    assert [d.add(t) for t in ids[:-1]] == [""] * (len(ids) - 1)
    assert d.add(ids[-1]) == "🐈"
    d = IncrementalDetokenizer(tok.decode)
    d.add(ids[0])
    assert d.flush() == REPLACEMENT             # cut short: shown as a full decode shows it


def test_stop_matcher_cuts_and_holds_back():
    m = StopMatcher(["END", "\n\n"])
    assert m.feed("hello E") == "hello "        # "E" may start "END"
    assert m.feed("x") == "Ex"
    assert m.feed("yz\n") == "yz"
    assert m.feed("\nmore") == "" and m.stopped
    assert m.feed("later") == "" and m.flush() == ""
    m = StopMatcher(["END"])
    assert m.feed("abEN") == "ab" and m.flush() == "EN"   # never completed: shown at the end
    m = StopMatcher(["lo w"])
    assert m.feed("hel") == "he" and m.feed("lo wor") == "l" and m.stopped   # "l" could have begun it
    assert StopMatcher([]).feed("anything") == "anything"
