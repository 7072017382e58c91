"""How this qnnrt was installed, so that a message asking for an optional extra names the command
that works here: `pip install -e 'CLONE[extra]'` when qnnrt runs from a source tree (an editable
install of a clone, or the clone run in place), `pip install 'qnnrt[extra]'` for a wheel."""
from __future__ import annotations

from pathlib import Path

# a wheel puts the package in site-packages, where no pyproject.toml sits beside it
_TREE = Path(__file__).resolve().parents[1]
SOURCE_TREE: Path | None = _TREE if (_TREE / "pyproject.toml").is_file() else None


def install_command(extra: str) -> str:
    """The command installing qnnrt's optional `extra` here."""
    return (f"pip install -e '{SOURCE_TREE}[{extra}]'" if SOURCE_TREE is not None
            else f"pip install 'qnnrt[{extra}]'")


def extra_hint(extra: str, packages: str) -> str:
    """The command installing qnnrt's optional `extra`, and the bare packages it stands for."""
    return f"{install_command(extra)} (or pip install {packages})"
