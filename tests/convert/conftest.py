"""The tiny models `qnnrt convert` is tested on (tools/fixtures/make_convert_models.py), made once
per maker version into the test cache, and the committed references of the numpy float model."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.data import DATA, TEST_CACHE
from tests.helpers.genie_bundle import FIXTURE_TOOLS, fixture_module

REFERENCES = DATA / "convert" / "references.json"
MAKER = FIXTURE_TOOLS / "make_convert_models.py"


@pytest.fixture(scope="session")
def maker():
    return fixture_module("make_convert_models")


@pytest.fixture(scope="session")
def models(maker) -> dict[str, Path]:
    """name -> the model's folder (llama, qwen2, qwen3) or file (gguf)."""
    tag = hashlib.sha256(MAKER.read_bytes()).hexdigest()[:16]
    root = TEST_CACHE / "convert_models" / tag
    done = root / "done"
    if not done.is_file():
        shutil.rmtree(root, ignore_errors=True)
        tmp = root.with_name(tag + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        maker.make(tmp)
        tmp.rename(root)
        done.write_text("ok\n")
    return {**{n: root / n for n in maker.MODELS}, "gguf": root / "llama.gguf"}


@pytest.fixture(scope="session")
def references() -> dict:
    return json.loads(REFERENCES.read_text())


def safe_prefix(ref: dict, threshold: float = 0.1) -> int:
    """How many reference tokens are safe to compare at fp16: up to the first whose top-2 margin
    is below ``threshold``."""
    for i, m in enumerate(ref["margins"]):
        if m < threshold:
            return i            # token i itself may flip: its top two are within fp16's noise
    return len(ref["margins"])
