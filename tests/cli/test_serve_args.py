"""`qnnrt serve`'s connection and CORS flags checked before anything loads (issue 47)."""
from __future__ import annotations

import argparse

import pytest

from qnnrt.cli import serve
from qnnrt.errors import QnnrtError


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    serve.add_parser(p.add_subparsers())
    return p.parse_args(["serve", "model.pte", *argv])


@pytest.mark.parametrize("argv, says", [
    (["--cors-origin", "http://ui.example/app"], "without a path"),
    (["--cors-origin", "ui.example"], "scheme://host"),
    (["--max-connections", "0"], "--max-connections 0"),
    (["--header-timeout", "0"], "--header-timeout 0"),
])
def test_bad_flags_are_refused_in_one_line(argv, says):
    with pytest.raises(QnnrtError, match=says):
        serve.check_args(_args(*argv))


def test_any_origin_with_a_key_is_warned_about(capsys):
    serve.check_args(_args("--cors-origin", "*", "--api-key", "k", "--cors-origin", "http://localhost:3000"))
    assert "--cors-origin '*' with --api-key" in capsys.readouterr().err
    serve.check_args(_args("--cors-origin", "*"))
    assert capsys.readouterr().err == ""
