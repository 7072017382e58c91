"""The README's serving example, run as written: its `qnnrt serve` command from the repository's root
(on a free port instead of 8000), then its client block with the official openai client (only the
address put in): the model in the clone chats and streams a reply."""
from __future__ import annotations

import pytest

from tests.helpers.readme import block_with, shell_command, substituted
from tests.serve.conftest import launch

pytest.importorskip("openai", reason="the README's client example needs openai (pip install -e '.[test]')")


def test_the_readme_serve_example_runs_as_written(tmp_path, capsys):
    argv = shell_command("qnnrt serve tests/data/genie/tiny_llama_f32 --model-name tiny --api-key")
    assert argv[:2] == ["qnnrt", "serve"] and "--port" not in argv
    server = launch([*argv[1:], "--port", "0"], tmp_path / "report.json")
    try:
        code = substituted(block_with("from openai import OpenAI"),
                           {'"http://127.0.0.1:8000/v1"': repr(server.base + "/v1")})
        exec(compile(code, "README.md", "exec"), {})
        assert capsys.readouterr().out.strip()
    finally:
        assert server.stop() in (0, 143), server.stderr()
