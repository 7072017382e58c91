"""The CLI's process model: every command runs in a spawned worker process, on every OS.

The parent (`qnnrt ...`) starts `python -c <worker>` with the same arguments, inheriting stdin,
stdout and stderr (progress lines and --json output stream live, a terminal stays a terminal), and
only waits. That gives:

- crash isolation: a worker dying of SIGSEGV/SIGBUS/SIGABRT inside a QNN library is exit 1 with a
  message, never a signal; a worker killed from outside (SIGKILL, perhaps the OOM killer) is
  reported as that, not blamed on the input. The worker is also what vets binaries qnnrt did not
  write (runtime/vet/policy.py, "worker" mode): it notes each risky QNN step (binary info, context
  creation, a context's first graph run) in a small file this parent creates (QNNRT_VET_STEP_FILE),
  so a crash names the binary and step, and a step silent past its stall timeout stops the worker
  with a message naming it;
- one way to stop: SIGINT / SIGTERM / SIGHUP to the parent are forwarded to the worker, which stops
  at once (interrupts landing inside a QNN log callback are deferred to just after the QNN call);
  a worker still alive after `GRACE_S` is killed; the exit status is 130 / 143 / 129;
- no orphan: the worker dies with its parent (PR_SET_PDEATHSIG on Linux, a kill-on-close job object
  on Windows), and the parent kills the worker whenever it leaves.

No fork: the same code path runs here and on Windows. QNNRT_NO_FORK=1 (or QNNRT_IN_PROCESS=1) runs
the command in-process, for debugging. QNNRT_DEBUG_WORKER=1 or --log-level debug prints the worker's pid on stderr.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from types import FrameType
from typing import Any, Callable
from qnnrt.spawn import python_command, signal_name

WORKER_ENV = "QNNRT_WORKER_PARENT"   # set in the worker's environment: the parent's pid
GRACE_S = 0.8                        # a signalled worker still alive after this is killed
# ... except a server, which lets in-flight requests end at their next token and writes its report
GRACE_S_BY_COMMAND = {"serve": 15.0}
STEP_PREFIX = "qnnrt-steps-"            # + pid: the worker's step notes (fileio.owned_prefix)
_CRASH_SIGNALS = {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT", "SIGSYS", "SIGTRAP"}


def stop_signals() -> list[int]:
    """The signals that stop a command (SIGHUP does not exist on Windows)."""
    return [s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP"))
            if s is not None]


class Stopped(KeyboardInterrupt):
    """A stop signal (SIGINT, SIGTERM, SIGHUP) in the worker: unwinds like Ctrl-C, so every
    `finally` runs (temp files are removed, contexts freed), then exits 128 + signum."""

    def __init__(self, signum: int):
        super().__init__(signal_name(signum))
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def in_process_requested() -> bool:
    return bool(os.environ.get("QNNRT_NO_FORK") or os.environ.get("QNNRT_IN_PROCESS"))


# -- the worker side ---------------------------------------------------------------------------
_stop_seen: int | None = None


def install_stop_handlers() -> dict[int, Any]:
    """In the process doing the work: the first stop signal raises `Stopped` where Python is, or,
    if that is inside QNN's log callback (within a C call), is deferred until the call returns.
    Later signals are only remembered, so they never interrupt the cleanup. Returns the previous
    handlers (for `restore_handlers`)."""
    from qnnrt._capi import log
    global _stop_seen
    _stop_seen = None

    def handler(signum: int, frame: FrameType | None) -> None:
        global _stop_seen
        if _stop_seen is not None:
            return
        _stop_seen = signum
        if log.in_callback(frame):
            log.defer(Stopped(signum))
            return
        raise Stopped(signum)

    previous = {}
    for s in stop_signals():
        try:
            previous[s] = signal.signal(s, handler)
        except (OSError, ValueError):  # not the main thread, or not settable here
            pass
    return previous


def restore_handlers(previous: dict[int, Any]) -> None:
    for s, h in previous.items():
        try:
            signal.signal(s, h)
        except (OSError, ValueError, TypeError):
            pass


def worker_main(run: Callable[[list[str]], int], argv: list[str]) -> None:
    """Entry of the spawned worker: never returns; exits with the command's status."""
    install_stop_handlers()
    try:
        parent = int(os.environ.pop(WORKER_ENV, "0") or 0)
    except ValueError:
        parent = 0
    from qnnrt.core.process import die_with_parent  # here: the parent process never needs qnnrt.core
    die_with_parent(parent)
    code = 1
    try:
        code = run(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Stopped as e:
        code = e.exit_code
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - an unexpected bug: show it, fail cleanly
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        try:
            import logging
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - exiting anyway
            pass
    os._exit(code)


# -- the parent side ---------------------------------------------------------------------------
def _worker_command(argv: list[str]) -> list[str]:
    return python_command("from qnnrt.cli.main import _worker; _worker(sys.argv[1:])", argv)


def _windows_kill_on_close_job(proc: subprocess.Popen) -> Any:
    """Windows: put the worker in a job object that kills it when the parent's handle closes."""
    if sys.platform != "win32":
        return None
    import ctypes
    from ctypes import wintypes
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined, unused-ignore]

    class BasicLimit(ctypes.Structure):
        _fields_ = [("PerProcessUserTimeLimit", ctypes.c_int64), ("PerJobUserTimeLimit", ctypes.c_int64),
                    ("LimitFlags", wintypes.DWORD), ("MinimumWorkingSetSize", ctypes.c_size_t),
                    ("MaximumWorkingSetSize", ctypes.c_size_t), ("ActiveProcessLimit", wintypes.DWORD),
                    ("Affinity", ctypes.c_size_t), ("PriorityClass", wintypes.DWORD),
                    ("SchedulingClass", wintypes.DWORD)]

    class IoCounters(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("r", "w", "o", "rb", "wb", "ob")]

    class ExtendedLimit(ctypes.Structure):
        _fields_ = [("BasicLimitInformation", BasicLimit), ("IoInfo", IoCounters),
                    ("ProcessMemoryLimit", ctypes.c_size_t), ("JobMemoryLimit", ctypes.c_size_t),
                    ("PeakProcessMemoryUsed", ctypes.c_size_t), ("PeakJobMemoryUsed", ctypes.c_size_t)]

    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, JobObjectExtendedLimitInformation = 0x2000, 9
    k32.CreateJobObjectW.restype = wintypes.HANDLE
    job = k32.CreateJobObjectW(None, None)
    if not job:
        return None
    info = ExtendedLimit()
    info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    k32.SetInformationJobObject(wintypes.HANDLE(job), JobObjectExtendedLimitInformation,
                                ctypes.byref(info), ctypes.sizeof(info))
    k32.AssignProcessToJobObject(wintypes.HANDLE(job), wintypes.HANDLE(int(proc._handle)))  # type: ignore[attr-defined, unused-ignore]  # noqa: SLF001 - Popen exposes no process handle
    return job  # closed by the OS when the parent exits: the worker goes with it


def _peak_worker_memory() -> str:
    try:
        import resource
        kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    except (ImportError, OSError):
        return ""
    return f"; its peak memory was {kib / (1 << 20):.2f} GiB" if kib else ""


def _report_signal(sig: int, argv: list[str], steps: list) -> int:
    """A worker that died of a signal qnnrt did not send: say what it was (and, for a crash, in
    which noted step of which binary); the exit status."""
    name = signal_name(sig)
    what = " ".join(argv)
    if name in _CRASH_SIGNALS and steps:
        from qnnrt.runtime.vet.watch import worker_crash_message
        print(f"qnnrt: error: {worker_crash_message(name, steps)}", file=sys.stderr)
        return 1
    if name in _CRASH_SIGNALS:
        print(f"qnnrt: error: the QNN library crashed ({name}) while running `qnnrt {what}`. The "
              f"input is most likely corrupt or was built for another QNN version; rebuild it, or "
              f"check it with `qnnrt inspect`.", file=sys.stderr)
        return 1
    hint = (", perhaps by the out-of-memory killer (see `dmesg`) or another process"
            if name == "SIGKILL" else ", sent by another process")
    print(f"qnnrt: error: the worker running `qnnrt {what}` was terminated by {name}{hint}"
          f"{_peak_worker_memory()}. This is not a problem of the input.", file=sys.stderr)
    return 128 + sig


def _debug_requested(argv: list[str]) -> bool:
    return any(a == "--log-level=debug" or (a == "--log-level" and argv[i + 1:i + 2] == ["debug"])
               for i, a in enumerate(argv))


def _output_folders(argv: list[str]) -> list[str]:
    """The folders a command writes into, from its arguments (where a killed worker's temp files
    can be)."""
    flags = {"--output-dir": True, "--report": False, "--heap-profiling-path": False,
             "--profile-path": False, "--dump-logits": True, "-o": False, "--output": False,
             "--trace": False}
    out = []
    for i, a in enumerate(argv):
        name, eq, val = a.partition("=")
        if name in flags:
            value = val if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if value:
                out.append(value if flags[name] else (os.path.dirname(os.path.abspath(value)) or "."))
    return out


def run_in_worker(argv: list[str]) -> int:
    """Run `qnnrt <argv>` in a spawned worker; the exit status the CLI should return."""
    sys.stdout.flush()
    sys.stderr.flush()
    received: list[int] = []
    proc: subprocess.Popen | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        if not received:
            received.append(signum)
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signum)
            except (OSError, ValueError):  # gone already; or Windows, where the console signals it
                pass

    previous = {}
    for s in stop_signals():
        try:
            previous[s] = signal.signal(s, forward)
        except (OSError, ValueError):
            pass
    from qnnrt.fileio import owned_prefix, remove_stale_temps
    from qnnrt.runtime.vet.policy import STEP_FILE_ENV
    remove_stale_temps(tempfile.gettempdir(), STEP_PREFIX)       # of commands that were SIGKILLed
    fd, step_file = tempfile.mkstemp(prefix=owned_prefix(STEP_PREFIX))
    os.close(fd)
    env = dict(os.environ, **{WORKER_ENV: str(os.getpid()), STEP_FILE_ENV: step_file})
    stalled: str | None = None
    try:
        proc = subprocess.Popen(_worker_command(argv), env=env)
        _job = _windows_kill_on_close_job(proc)
        if os.environ.get("QNNRT_DEBUG_WORKER") or _debug_requested(argv):
            print(f"qnnrt: worker pid {proc.pid}", file=sys.stderr, flush=True)
        if received:  # a signal arrived while the worker was being started
            forward(received[0], None)
        deadline: float | None = None
        killed = False
        grace = GRACE_S_BY_COMMAND.get(argv[0], GRACE_S) if argv else GRACE_S
        while True:
            if received and deadline is None:
                deadline = time.monotonic() + grace
            try:
                code = proc.wait(timeout=0.05 if deadline is not None else 0.5)
                break
            except subprocess.TimeoutExpired:
                if stalled is None and not received:
                    stalled = _stalled_step(step_file)
                    if stalled is not None:
                        proc.kill()
                if deadline is not None and time.monotonic() > deadline and not killed:
                    proc.kill()
                    killed = True
                    print(f"qnnrt: the worker did not stop within {grace} s of "
                          f"{signal_name(received[0])}; killed it", file=sys.stderr)
    finally:
        if proc is not None and proc.poll() is None:  # the parent leaves for any reason: no orphan
            proc.kill()
            proc.wait()
        if proc is not None and proc.returncode is not None and proc.returncode < 0:
            from qnnrt.fileio import remove_temps_of  # killed mid-write: no partial file stays
            remove_temps_of(proc.pid, _output_folders(argv))
        restore_handlers(previous)
        steps = _read_steps(step_file)
        _remove(step_file)
    if received:
        return 128 + received[0]
    if stalled is not None:
        print(f"qnnrt: error: {stalled}", file=sys.stderr)
        return 1
    if code < 0:
        return _report_signal(-code, argv, steps)
    return code


def _stalled_step(step_file: str) -> str | None:
    """The message for a risky step the worker noted that is past its stall timeout, if any."""
    from qnnrt.runtime.vet.watch import read_steps, stalled_step, worker_stall_message
    step = stalled_step(read_steps(step_file))
    return worker_stall_message(step) if step is not None else None


def _read_steps(step_file: str) -> list:
    from qnnrt.runtime.vet.watch import read_steps
    return read_steps(step_file)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
