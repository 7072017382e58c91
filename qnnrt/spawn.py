"""Starting a fresh interpreter on this qnnrt (the CLI's worker, the PD workers), and naming the signal
that ended one: one definition for every layer that spawns. Standard library only, so the CLI's parent
process stays light."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder holding qnnrt/


def python_command(code: str, args: list[str]) -> list[str]:
    """`python -c code args...` with this interpreter and its -X / -W flags; `code` runs with this
    qnnrt's folder first on sys.path, so the child imports the same qnnrt as its parent."""
    flags: list[str] = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]  # noqa: SLF001 - the stdlib's own way to pass -X / -W flags on
    prelude = "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    return [sys.executable, *flags, "-c", prelude + code, _ROOT, *args]


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
