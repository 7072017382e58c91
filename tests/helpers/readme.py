"""The README's Python examples, so the tests run each one as a user would paste it (only the
names a user replaces with their own files are replaced)."""
from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks() -> list[str]:
    return _BLOCK.findall(README.read_text(encoding="utf-8"))


def block_with(marker: str) -> str:
    """The one Python block containing `marker`."""
    found = [b for b in python_blocks() if marker in b]
    assert len(found) == 1, f"{len(found)} README Python blocks contain {marker!r}"
    return found[0]


def substituted(block: str, replacements: dict[str, str]) -> str:
    """`block` with each placeholder replaced; every placeholder must be there."""
    for old, new in replacements.items():
        assert old in block, f"the README block no longer says {old!r}"
        block = block.replace(old, new)
    return block
