"""The code blocks of the README and the docs/ pages, so the tests run each one as a user would paste
it (only the names a user replaces with their own files are replaced)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]    # every page whose blocks are tested
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
_SH = re.compile(r"^```sh\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks() -> list[str]:
    return [b for page in PAGES for b in _BLOCK.findall(page.read_text(encoding="utf-8"))]


def block_with(marker: str) -> str:
    """The one Python block (of the README and docs/) containing `marker`."""
    found = [b for b in python_blocks() if marker in b]
    assert len(found) == 1, f"{len(found)} Python blocks of the README and docs/ contain {marker!r}"
    return found[0]


def substituted(block: str, replacements: dict[str, str]) -> str:
    """`block` with each placeholder replaced; every placeholder must be there."""
    for old, new in replacements.items():
        assert old in block, f"the block no longer says {old!r}"
        block = block.replace(old, new)
    return block


def shell_lines() -> list[tuple[str, str]]:
    """(page, command) of every line of the sh blocks of the README and docs/, its comment cut."""
    out = []
    for page in PAGES:
        for block in _SH.findall(page.read_text(encoding="utf-8")):
            out += [(page.name, line.split("  #")[0].strip()) for line in block.splitlines() if line.strip()]
    return out


def shell_command(prefix: str) -> list[str]:
    """The one command of the sh blocks that starts with `prefix`, as argv."""
    found = [line for _, line in shell_lines() if line.startswith(prefix)]
    assert len(found) == 1, f"{len(found)} shell lines of the README and docs/ start with {prefix!r}"
    return shlex.split(found[0])
