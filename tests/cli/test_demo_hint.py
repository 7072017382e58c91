"""The demo's `next:` hint runs as printed: where matplotlib (the `plot` extra) is missing, the hint
installs it before `qnnrt plot`."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from qnnrt.cli.demo import next_commands


def test_the_hint_installs_the_plot_extra_where_it_is_missing(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    hint = next_commands(Path("/p"), "tiny")
    run, install, plot = (c.strip() for c in hint.split("&&"))
    assert run.startswith("qnnrt run /p ") and install.startswith("pip install ") and "[plot]" in install
    assert plot == "qnnrt plot r.json"


def test_no_install_where_matplotlib_is_there():
    assert importlib.util.find_spec("matplotlib") is not None     # the test extra has it
    assert "pip install" not in next_commands(Path("/p"), "tiny")
