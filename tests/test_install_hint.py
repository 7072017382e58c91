"""Install hints fit how qnnrt was installed: run from this clone they name an editable install of
it; run from a wheel-like copy in site-packages (no pyproject.toml beside it) they name the index."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from qnnrt.install import extra_hint
from tests.helpers.cli_helpers import ROOT

SHOW = "from qnnrt.install import extra_hint; print(extra_hint('plot', 'matplotlib'))"


def test_a_clone_is_told_to_install_itself_editable():
    assert extra_hint("plot", "matplotlib") == f"pip install -e '{ROOT}[plot]' (or pip install matplotlib)"


def test_a_wheel_install_is_told_the_index_command(tmp_path):
    site = tmp_path / "site-packages"
    shutil.copytree(Path(ROOT) / "qnnrt", site / "qnnrt", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(site))
    out = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, env=env, cwd=tmp_path,
                         check=True).stdout.strip()
    assert out == "pip install 'qnnrt[plot]' (or pip install matplotlib)"
