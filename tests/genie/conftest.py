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


@pytest.fixture(scope="session")
def genie_library() -> None:
    """Skip where the onnxruntime-qnn wheel has no libGenie.so."""
    import onnxruntime_qnn
    if not (Path(onnxruntime_qnn.__file__).parent / "libGenie.so").is_file():
        pytest.skip("libGenie.so is not in this onnxruntime-qnn wheel (its Linux x86_64 2.7 wheel has it)")


@pytest.fixture
def bundle_copy(tmp_path: Path) -> Path:
    """A copy of the tiny bundle (a test changes its JSON files)."""
    return copy_bundle(GENIE_F32, tmp_path / "bundle")


def copy_bundle(src: Path, out: Path) -> Path:
    """`src` copied to `out` (copied, not linked: a bundle's files may not lead out of its folder)."""
    out.mkdir()
    for f in src.iterdir():
        shutil.copy(f, out / f.name)
    return out


def edit_config(bundle: Path, change) -> None:
    """Rewrite the bundle's genie_config.json through `change(dict)`."""
    p = bundle / "genie_config.json"
    d = json.loads(p.read_text())
    change(d)
    p.write_text(json.dumps(d, indent=2))


def positional_encoding(item):
    """A config change putting `item` as the model's positional-encoding (QnnHtp's RoPE keys removed)."""
    def change(d):
        htp = d["dialog"]["engine"]["backend"]["QnnHtp"]
        htp.pop("rope-theta"), htp.pop("pos-id-dim")
        d["dialog"]["engine"]["model"]["positional-encoding"] = item
    return change
