"""A Genie bundle fixture, copied where a test may break it (bad bundles)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.data import GENIE_F32


@pytest.fixture(scope="session")
def references() -> list[dict]:
    """The maker's float reference: prompt ids, greedy tokens and text per prompt."""
    return json.loads((GENIE_F32 / "references.json").read_text())["references"]


@pytest.fixture
def bundle_copy(tmp_path: Path) -> Path:
    """A copy of the tiny bundle (2 MB; copied, not linked: a bundle's links may not lead out of it)."""
    out = tmp_path / "bundle"
    out.mkdir()
    for f in GENIE_F32.iterdir():
        shutil.copy(f, out / f.name)
    return out


def edit_config(bundle: Path, change) -> None:
    """Rewrite the bundle's genie_config.json through `change(dict)`."""
    p = bundle / "genie_config.json"
    d = json.loads(p.read_text())
    change(d)
    p.write_text(json.dumps(d, indent=2))
