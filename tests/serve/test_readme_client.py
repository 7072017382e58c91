"""The README's serving example, run as written with the official client against a live server
(only its address and key put in): it streams a reply."""
from __future__ import annotations

import pytest

from tests.helpers.readme import block_with, substituted
from tests.serve.conftest import API_KEY

pytest.importorskip("openai", reason="the README's client example needs openai (pip install -e '.[test]')")


def test_the_readme_client_example_streams_a_reply(server, capsys):
    code = substituted(block_with("from openai import OpenAI"), {
        '"http://127.0.0.1:8000/v1"': repr(server.base + "/v1"), '"sk-local"': repr(API_KEY)})
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip()
