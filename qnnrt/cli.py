"""`qnnrt` command line: inspect, run, build, demo, plot.

Exit status: 0 success, 1 a user or QNN error (message on stderr; traceback only with
--log-level debug), 130 interrupted.
"""
from __future__ import annotations

import argparse
import logging
import sys

from qnnrt.errors import QnnrtError

LOG_LEVELS = ["error", "warn", "info", "verbose", "debug"]
_PY_LEVELS = {"error": logging.ERROR, "warn": logging.WARNING, "info": logging.INFO,
              "verbose": logging.DEBUG, "debug": logging.DEBUG}


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=_PY_LEVELS.get(level, logging.WARNING), stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("qnnrt").setLevel(_PY_LEVELS.get(level, logging.WARNING))
    # QNN's own log is chatty at warning level (and its errors are attached to the QnnError we
    # raise): show it from --log-level info on
    logging.getLogger("qnnrt.qnn").setLevel(
        _PY_LEVELS[level] if level in ("info", "verbose", "debug") else logging.CRITICAL + 1)


def build_parser() -> argparse.ArgumentParser:
    from qnnrt import __version__
    from qnnrt.commands import inspect_cmd, run_cmd
    p = argparse.ArgumentParser(prog="qnnrt", description="Run and inspect Qualcomm QNN HTP "
                                "context binaries and programs of many of them.")
    p.add_argument("--version", action="version", version=f"qnnrt {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    inspect_cmd.add_parser(sub)
    run_cmd.add_parser(sub)
    for modname in ("qnnrt.build.cli", "qnnrt.commands.demo_cmd", "qnnrt.plot"):
        try:
            mod = __import__(modname, fromlist=["_"])
        except ImportError:
            continue
        for attr in ("add_parser", "add_build_parser", "add_plot_parser"):
            if hasattr(mod, attr):
                getattr(mod, attr)(sub)
                break
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 1
    level = getattr(args, "log_level", None) or "warn"
    _setup_logging(level)
    try:
        return int(args.func(args) or 0)
    except QnnrtError as e:
        if level == "debug":
            logging.getLogger("qnnrt").exception("error")
        print(f"qnnrt {args.command}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `qnnrt inspect x | head`: the reader left, nothing is wrong
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"qnnrt {args.command}: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError) as e:
        if level == "debug":
            logging.getLogger("qnnrt").exception("error")
        print(f"qnnrt {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
