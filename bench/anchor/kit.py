"""Where the parts of the ExecuTorch comparison kit are, for the bench scripts.

ANCHOR is the folder made by `bash bench/anchor/setup.sh ANCHOR`; a script takes it as `--anchor DIR`,
by default `$QNNRT_ANCHOR` (which `. ANCHOR/env.sh` sets). README.md beside this file says what is in it.
"""
from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

KIT = Path(__file__).resolve().parent
ET_RUN = KIT / "et_run.py"
SHIM_IN_ANCHOR = Path("qnn_sdk/lib/x86_64-linux-clang/libQnnHtp.so")
# what qnnrt needs of the shim: it speaks QNN 2.51, so its device configs pass through unchanged
QNNRT_SHIM_ENV = {"QNN_SHIM_NO_FIX": "1", "QNN_SHIM_KEEP_PLATFORM": "1"}


def add_anchor_argument(ap: argparse.ArgumentParser) -> None:
    env = os.environ.get("QNNRT_ANCHOR")
    ap.add_argument("--anchor", type=Path, default=Path(env) if env else None,
                    help="the folder made by bench/anchor/setup.sh (default: $QNNRT_ANCHOR, set by "
                         "ANCHOR/env.sh)")


def anchor_dir(given: Path | None) -> Path:
    """`given`, checked to be a kit folder; exits with what to do when it is not."""
    if given is None:
        raise SystemExit("no ExecuTorch kit: make one with `bash bench/anchor/setup.sh ANCHOR`, then give "
                         "--anchor ANCHOR or `. ANCHOR/env.sh`")
    if not (given / "env.sh").is_file() or not (given / SHIM_IN_ANCHOR).is_file():
        raise SystemExit(f"{given} is not a folder made by bench/anchor/setup.sh (no env.sh or {SHIM_IN_ANCHOR}); "
                         f"run `bash bench/anchor/setup.sh {given}`")
    return given


def shim_lib(anchor: Path) -> Path:
    """The shim, as libQnnHtp.so: give it to qnnrt as --backend-lib / backend_lib."""
    return anchor / SHIM_IN_ANCHOR


def kit_env(anchor: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with ANCHOR/env.sh sourced into it."""
    out = subprocess.run(["bash", "-c", '. "$1" && env -0', "bash", str(anchor / "env.sh")],
                         env=dict(os.environ if base is None else base), capture_output=True, check=True).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
