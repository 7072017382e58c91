"""`qnnrt` command line: inspect, run, llm, build, demo, plot.

Exit status: 0 success, 1 a user or QNN error (message on stderr; traceback only with
--log-level debug), 130 interrupted.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
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


SUBCOMMANDS = ("inspect", "run", "llm", "build", "demo", "plot")


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand module is imported: one that fails to import is an error, never a command
    silently missing from the CLI."""
    import importlib

    from qnnrt import __version__
    p = argparse.ArgumentParser(prog="qnnrt", description="Run and inspect Qualcomm QNN HTP "
                                "context binaries and programs of many of them.")
    p.add_argument("--version", action="version", version=f"qnnrt {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"qnnrt.cli.{name}").add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run a command in a forked child, so that a crash inside a QNN library (e.g. on a corrupt
    binary) becomes a clear error and exit status 1, never a signal. QNNRT_NO_FORK=1 runs in-process."""
    if os.environ.get("QNNRT_NO_FORK") or not hasattr(os, "fork"):
        return _main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child does the work
        code = 1
        try:
            code = _main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # an unexpected bug: show it, fail cleanly
            import traceback
            traceback.print_exc()
            code = 1
        finally:
            try:
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:
                pass
            os._exit(code)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the child handles Ctrl-C and reports it
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        what = " ".join(argv if argv is not None else sys.argv[1:])
        print(f"qnnrt: error: the QNN library crashed ({name}) while running `qnnrt {what}`. The "
              f"input is most likely corrupt or was built for another QNN version; rebuild it, or "
              f"check it with `qnnrt inspect`.", file=sys.stderr)
        return 1
    return os.WEXITSTATUS(status)


def _main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except ImportError as e:  # a broken install: say what is missing, never drop the command
        print(f"qnnrt: error: a qnnrt command failed to import ({e}); reinstall qnnrt "
              f"(pip install -e .) and its dependencies", file=sys.stderr)
        return 1
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: bad usage is a user error (1), --help / --version are 0
        return 0 if e.code in (0, None) else 1
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 1
    level = getattr(args, "log_level", None) or "warn"
    _setup_logging(level)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # e.g. `qnnrt inspect x | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"qnnrt {args.command}: interrupted", file=sys.stderr)
        return 130
    except (QnnrtError, OSError, ValueError) as e:  # after BrokenPipeError, an OSError
        if level == "debug":
            logging.getLogger("qnnrt").exception("error")
        print(f"qnnrt {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
