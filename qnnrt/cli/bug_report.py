"""An internal error (an exception that is not a qnnrt error: a bug in qnnrt) told as one: one line
on stderr that says so, and a file with what a bug report needs (the traceback, the command line,
the versions), whose path the line names.

Files go to $QNNRT_BUG_REPORT_DIR, else <the user cache folder>/bug-reports, else the temporary
folder when that cannot be written."""
from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
import traceback
from importlib import metadata
from pathlib import Path

from qnnrt.fileio import default_cache_dir

DIR_ENV = "QNNRT_BUG_REPORT_DIR"
PACKAGES = ("qnnrt", "numpy", "onnx", "onnxruntime", "onnxruntime-qnn", "flatbuffers", "tokenizers",
            "starlette", "uvicorn")


def versions() -> dict[str, str]:
    """Python, the platform, and each relevant package's installed version (or 'not installed')."""
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def report_text(argv: list[str], exc: BaseException) -> str:
    lines = ["qnnrt bug report", f"time: {time.strftime('%Y-%m-%d %H:%M:%S %z')}",
             "command: qnnrt " + " ".join(argv), ""]
    lines += [f"{k}: {v}" for k, v in versions().items()]
    lines += ["", "".join(traceback.format_exception(exc)).rstrip()]
    return "\n".join(lines) + "\n"


def _folders() -> list[Path]:
    env = os.environ.get(DIR_ENV)
    return ([Path(env)] if env else []) + [default_cache_dir() / "bug-reports", Path(tempfile.gettempdir())]


def write_report(argv: list[str], exc: BaseException) -> Path | None:
    """The report's path, or None when no folder could take it."""
    text = report_text(argv, exc)
    name = f"qnnrt-bug-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    for folder in _folders():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            path.write_text(text)
            return path
        except OSError:
            continue
    return None


def internal_error_message(command: str, argv: list[str], exc: BaseException) -> str:
    """What the CLI prints for an internal error; the report is written on the way."""
    path = write_report(argv, exc)
    where = (f"the traceback, command line and versions are in {path}: please attach it to a bug "
             f"report" if path else "no bug report file could be written; run again with "
             "--log-level debug (or QNNRT_NO_FORK=1) to see the traceback")
    return (f"qnnrt {command}: internal error (a bug in qnnrt, not in your input): "
            f"{type(exc).__name__}: {exc}\n  {where}")
