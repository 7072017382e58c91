"""The README's Python examples, so the tests run each one as a user would paste it (only the
names a user replaces with their own files are replaced)."""
from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
_SH = re.compile(r"^```sh\n(.*?)^```", re.DOTALL | re.MULTILINE)


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


def shell_command(prefix: str) -> list[str]:
    """The one command of the README's sh blocks that starts with `prefix`, as argv (its comment cut)."""
    import shlex
    lines = [line.split("  #")[0].strip() for block in _SH.findall(README.read_text(encoding="utf-8"))
             for line in block.splitlines()]
    found = [line for line in lines if line.startswith(prefix)]
    assert len(found) == 1, f"{len(found)} README shell lines start with {prefix!r}"
    return shlex.split(found[0])
