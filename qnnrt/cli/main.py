"""`qnnrt` command line: inspect, run, llm, serve, build, convert, demo, plot, doctor.

Exit status: 0 success, 1 a user or QNN error or a crash inside QNN (message on stderr; traceback
only with --log-level debug) or an internal error (a bug in qnnrt: said so, the traceback in a bug
report file the message names), 130 / 143 / 129 stopped by SIGINT / SIGTERM / SIGHUP.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from qnnrt._capi.types import LogLevel
from qnnrt.errors import QnnrtError
from qnnrt.install import SOURCE_TREE


def _setup_logging(name: str) -> None:
    level = LogLevel.parse(name)
    logging.basicConfig(level=level.python_level, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("qnnrt").setLevel(level.python_level)
    # QNN's own log is chatty at warning level (and its errors are attached to the QnnError we
    # raise): show it from --log-level info on
    logging.getLogger("qnnrt.qnn").setLevel(
        level.python_level if level >= LogLevel.INFO else logging.CRITICAL + 1)


SUBCOMMANDS = ("inspect", "run", "llm", "serve", "build", "convert", "demo", "plot", "doctor")


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
    """Run a command in a spawned worker process (qnnrt.cli.process), so that a crash inside a QNN
    library (e.g. on a corrupt binary) becomes a clear error and exit status 1, never a signal, and
    SIGINT / SIGTERM / SIGHUP stop the work (130 / 143 / 129). QNNRT_NO_FORK=1 runs in-process."""
    from qnnrt.cli import process
    args = list(sys.argv[1:] if argv is None else argv)
    if process.in_process_requested():
        previous = process.install_stop_handlers()
        try:
            return _main(args)
        finally:
            process.restore_handlers(previous)
    return process.run_in_worker(args)


def _worker(argv: list[str]) -> None:
    """The spawned worker's entry (see qnnrt.cli.process); exits with the command's status."""
    from qnnrt.cli import process
    process.worker_main(_main, argv)


def _main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except ImportError as e:  # a broken install: say what is missing, never drop the command
        reinstall = f"pip install -e '{SOURCE_TREE}'" if SOURCE_TREE is not None else "pip install qnnrt"
        print(f"qnnrt: error: a qnnrt command failed to import ({e}); reinstall qnnrt "
              f"({reinstall}) and its dependencies", file=sys.stderr)
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
        code = int(args.func(args) or 0)
        from qnnrt._capi import log
        log.raise_pending()  # an interrupt QNN's log callback deferred and nothing raised yet
        return code
    except BrokenPipeError:  # e.g. `qnnrt inspect x | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt as e:
        return _stopped(args.command, e)
    except (QnnrtError, OSError) as e:  # after BrokenPipeError, an OSError
        if level == "debug":
            logging.getLogger("qnnrt").exception("error")
        print(f"qnnrt {args.command}: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # not a qnnrt error: a bug, told as one
        from qnnrt.cli.bug_report import internal_error_message
        if level == "debug":
            logging.getLogger("qnnrt").exception("internal error")
        print(internal_error_message(args.command, list(argv or []), e), file=sys.stderr)
        return 1


def _stopped(command: str, e: KeyboardInterrupt) -> int:
    """The message and exit status of a command stopped by Ctrl-C or a stop signal."""
    from qnnrt.cli.process import Stopped, stop_signals
    for s in stop_signals():
        try:
            signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C must not cut the message short
        except (OSError, ValueError):  # not the main thread
            pass
    if isinstance(e, Stopped) and e.signum != signal.SIGINT:
        print(f"qnnrt {command}: terminated ({e})", file=sys.stderr)
        return e.exit_code
    print(f"qnnrt {command}: interrupted", file=sys.stderr)
    return 130


if __name__ == "__main__":
    sys.exit(main())
