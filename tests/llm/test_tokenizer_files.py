"""A tokenizer folder's files read through qnnrt's bounded readers (issue 47): configs nested 100,000
deep, too large, or a chat template that is not UTF-8 are TokenizerErrors naming the file (never a
RecursionError, UnicodeDecodeError or a 200 MB read)."""
from __future__ import annotations

import pytest

from qnnrt.llm.errors import TokenizerError
from qnnrt.llm.text import TextTokenizer
from tests.helpers.llm_text import text_folder  # noqa: F401


@pytest.fixture
def folder(text_folder, tmp_path):  # noqa: F811
    import shutil
    out = tmp_path / "tok"
    shutil.copytree(text_folder, out)
    return out


@pytest.mark.parametrize("name", ["tokenizer_config.json", "generation_config.json"])
def test_a_config_nested_100000_deep_is_a_clear_error(folder, name):
    (folder / name).write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(TokenizerError, match="deeper than 64") as e:
        TextTokenizer.from_path(folder)
    assert name in str(e.value)


@pytest.mark.parametrize("name, what", [("tokenizer_config.json", "more than the 67108864"),
                                        ("tokenizer.json", "more than the 268435456")])
def test_a_huge_file_is_refused_from_its_size(folder, name, what):
    with open(folder / name, "wb") as f:
        f.truncate(300 << 20)                                # sparse: nothing is written or read
    with pytest.raises(TokenizerError, match=what) as e:
        TextTokenizer.from_path(folder)
    assert name in str(e.value)


def test_a_chat_template_that_is_not_utf8_names_the_file(folder):
    (folder / "chat_template.jinja").write_bytes(b"{{ bos_token }}\xff\xfe")
    with pytest.raises(TokenizerError, match="not UTF-8") as e:
        TextTokenizer.from_path(folder)
    assert "chat_template.jinja" in str(e.value) and "byte 15" in str(e.value)


def test_template_errors_name_where_the_template_came_from(folder):
    tok = TextTokenizer.from_path(folder)
    assert tok.template_source == f"the chat template {folder / 'chat_template.jinja'}"
