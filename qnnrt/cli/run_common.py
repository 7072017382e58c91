"""What the subcommands that open and run a program share (run, llm, serve, demo): the runtime,
performance and trace options, opening the program, the targets check, the report and its
profiles, the latency and time figures, the performance and recovery lines."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from qnnrt._capi.types import LOG_LEVEL_NAMES
from qnnrt.core.profile import PROFILE_LEVELS
from qnnrt.errors import QnnrtError
from qnnrt.fileio import check_output_dir, check_writable, write_atomic
from qnnrt.progress import Heartbeat, ProgressBar, progress_interval
from qnnrt.runtime.recovery import DEFAULT_MAX_RECOVERIES



def add_runtime_options(p) -> None:
    """Options every command that loads and runs a program shares (run, llm)."""
    p.add_argument("--residency", default="auto",
                   help="auto (default), eager, lazy, sequential, bounded:K, bounded:<size> or "
                        "multi-pd[:N] (contexts spread over N PD worker processes, all resident)")
    p.add_argument("--max-pds", type=int, default=None,
                   help="auto spreads a program that does not fit one PD over at most this many PD "
                        "worker processes (default 4; 1: one PD that evicts)")
    p.add_argument("--report", help="write a JSON report to this file")
    p.add_argument("--pd-budget", help="PD budget auto plans with (e.g. 3.4GiB), instead of the one "
                   "learned for this backend")
    p.add_argument("--soc", help="SoC model number or name (e.g. 43 or SM8550)")
    p.add_argument("--backend-lib", help="path to libQnnHtp.so (default: discovered)")
    p.add_argument("--heap-profiling-path", help="write the heap profile (two lines + .json)")
    p.add_argument("--profile-level", default="off", choices=list(PROFILE_LEVELS))
    p.add_argument("--profile-path", help="write the execution profile (JSON + CSV)")
    add_trace_options(p)
    p.add_argument("--max-input-bytes", help="refuse an inference whose inputs would take more "
                   "(e.g. 2GiB; default: QNNRT_MAX_INPUT_BYTES, else a quarter of the RAM)")
    p.add_argument("--max-recoveries", type=int, default=DEFAULT_MAX_RECOVERIES, metavar="N",
                   help="graph calls failing with a transient device error (1100, 1007, 1011) to "
                        f"recover per run by re-creating their contexts (default "
                        f"{DEFAULT_MAX_RECOVERIES}; 0: none)")
    p.add_argument("--no-vet", action="store_true",
                   help="do not vet binaries qnnrt did not write (by default the worker notes each "
                        "risky QNN step on them, so a crash or a stall names the binary and step)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (by default: a bar on a terminal, else a line "
                        "every 10 s)")
    p.add_argument("--log-level", default="warn",
                   choices=LOG_LEVEL_NAMES)
    add_performance_options(p)


def add_trace_options(p) -> None:
    """--trace FILE.json (run, llm, serve, demo): the whole run as a Chrome trace-event file."""
    from qnnrt.profiling.trace import DEFAULT_MAX_EVENTS
    p.add_argument("--trace", metavar="FILE.json",
                   help="write a Chrome trace-event file of the whole run (open it in Perfetto UI or "
                        "chrome://tracing): a track per process (this one, each PD worker), context "
                        "creations / frees / evictions, every graph call, CPU ops, LLM phases, "
                        "requests; counters of live contexts, PD bytes and (with "
                        "--heap-profiling-path) the heap; QNN's per-op events at --profile-level detailed")
    p.add_argument("--trace-max-events", type=int, default=DEFAULT_MAX_EVENTS, metavar="N",
                   help=f"--trace keeps at most N events, then notes how many it dropped "
                        f"(default {DEFAULT_MAX_EVENTS})")


def open_tracer(args):
    """The run's Tracer when --trace is given (its file checked writable now), else None."""
    path = getattr(args, "trace", None)
    if path is None:
        return None
    from qnnrt.profiling.trace import Tracer
    check_writable(path, "trace")
    return Tracer(path, max_events=args.trace_max_events)


def traced(body: Callable[[Any, Any], int], args: Any) -> int:
    """`body(args, tracer)` with the run's tracer (--trace), the trace written after it whatever
    happened: after every program closed (their frees are in it), also after a failure or a
    signal (the trace shows where it stopped)."""
    tracer = open_tracer(args)
    try:
        return body(args, tracer)
    finally:
        finish_trace(tracer)


def finish_trace(tracer) -> None:
    """Write the trace (after every program closed: their frees are in it) and say where; nothing
    when nothing was traced (a bad argument or input refused before any work)."""
    if tracer is None or not tracer.summary()["events"]:
        return
    path = tracer.write()
    s = tracer.summary()
    capped = (f"; its cap of {s['max_events']} events was reached, {s['dropped']} later event(s) "
              f"dropped (--trace-max-events)" if s["dropped"] else "")
    print(f"trace: {path} ({s['events']} events, {s['processes']} process track(s); open it in "
          f"https://ui.perfetto.dev or chrome://tracing){capped}")


def _max_pds(args) -> dict:
    n = getattr(args, "max_pds", None)
    if n is None:
        return {}
    if n < 1:
        raise QnnrtError(f"--max-pds {n}: give a whole number >= 1")
    return {"max_pds": n}


def add_performance_options(p) -> None:
    """The HTP performance vote and the optimizations a file may ask for (run, llm, demo)."""
    from qnnrt.runtime.performance import MODES
    p.add_argument("--htp-performance-mode", metavar="MODE", type=_mode,
                   help="HTP performance vote: " + ", ".join(MODES) + " (default: what the file "
                   "asks, e.g. a .pte's compile spec; `default` makes no vote)")
    p.add_argument("--rpc-control-latency", type=int, metavar="US",
                   help="RPC control latency vote in microseconds (default: the mode's, 100)")
    p.add_argument("--rpc-polling-time", type=int, metavar="US",
                   help="RPC polling time vote in microseconds, 0..9999 (default: the mode's)")
    p.add_argument("--shared-buffer", action="store_true", default=None,
                   help="graph I/O in registered rpcmem (default: as the file asks; off where the "
                   "backend has none)")


def _mode(text: str) -> str:
    import argparse
    from qnnrt.runtime.performance import check_mode
    try:
        return check_mode(text)
    except QnnrtError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def performance_options(args, default_mode: str | None = None) -> dict:
    """LoadOptions fields from the performance options (absent on commands without them)."""
    return {"performance_mode": getattr(args, "htp_performance_mode", None),
            "performance_mode_default": default_mode,
            "rpc_control_latency_us": getattr(args, "rpc_control_latency", None),
            "rpc_polling_time_us": getattr(args, "rpc_polling_time", None),
            "shared_buffer": getattr(args, "shared_buffer", None)}


def open_program(args, graph: str | None = None, default_mode: str | None = None, tracer=None):
    """(program, execution profiler or None) loaded with the shared runtime options;
    `default_mode`: the performance mode when neither the user nor the file names one; `tracer`:
    the run's trace (open_tracer), which the command writes when it is done."""
    from qnnrt.loader import LoadOptions, load
    from qnnrt.runtime.vet.policy import VetMode
    quiet = getattr(args, "quiet", False)
    tty = sys.stderr.isatty()
    bar = ProgressBar("creating contexts") if tty and not quiet else None
    profiler = _exec_profiler(args.profile_level)
    vet_bar = ProgressBar("vetting binaries in a child process") if tty and not quiet else None
    loading = {"done": 0, "total": 0, "vetted": 0, "to_vet": 0}

    def load_progress(done: int, total: int) -> None:
        loading.update(done=done, total=total)
        if bar:
            bar.update(done, total)

    def vet_progress(done: int, total: int) -> None:
        loading.update(vetted=done, to_vet=total)
        if vet_bar:
            vet_bar.update(done, total)

    def status() -> str:
        if loading["vetted"] < loading["to_vet"]:
            return f"vetting {loading['vetted']}/{loading['to_vet']} binaries in a child process"
        return f"contexts created {loading['done']}/{loading['total'] or '?'}"
    # in the CLI's worker (cli/process.py) vetting costs no child: the worker is the isolation
    vet: VetMode | bool = False if getattr(args, "no_vet", False) else "worker"
    with heartbeat(quiet or tty, f"qnnrt {args.command}: loading", status):
        prog = load(args.path, residency=args.residency, soc=args.soc, backend_lib=args.backend_lib,
                    options=LoadOptions(log_level=args.log_level, graph=graph,
                                        heap_profiling_path=args.heap_profiling_path,
                                        profile_level=args.profile_level, exec_profiler=profiler,
                                        progress=load_progress, pd_budget=args.pd_budget,
                                        vet=vet, vet_progress=vet_progress,
                                        max_recoveries=args.max_recoveries, **_max_pds(args),
                                        trace=tracer,
                                        **performance_options(args, default_mode)))
    if vet_bar:
        vet_bar.done()
    if bar:
        bar.done()
    return prog, profiler


def vetting_json(prog, args) -> dict:
    """The report's `vetting` section: what vetting did on this run and what it cost."""
    if prog.vet_reports:
        return prog.vet_reports[0].to_json()
    return {"mode": "off" if getattr(args, "no_vet", False) else "none needed", "binaries": 0}


def _profile_paths(path: str) -> list[str]:
    import os
    root, ext = os.path.splitext(path)
    return [root + ".json" if ext.lower() == ".csv" else path, root + ".csv"]


def check_targets(args) -> None:
    """Every file and folder `run` / `llm` will write: writable (probed, so a read-only mount fails too),
    not a symbolic link, with free space; all before the program loads."""
    if args.report:
        check_writable(args.report, "report")
    if args.profile_path:
        for p in _profile_paths(args.profile_path):
            check_writable(p, "execution profile")
    if args.heap_profiling_path:
        check_writable(args.heap_profiling_path, "heap profile")
        check_writable(args.heap_profiling_path + ".json", "heap profile timeline")
    if getattr(args, "output_dir", None):
        check_output_dir(args.output_dir, "outputs")


def add_profiles(report: dict, prog, profiler, args) -> None:
    """After the program closed: the heap and execution profiles and the performance section (with
    the votes' release) into the report, the profile file."""
    if prog.performance is not None:
        report["performance"] = prog.performance.to_json()
    if prog.heap is not None:
        report["heap"] = prog.heap.to_json()
    if profiler is not None:
        report["profile"] = profiler.to_json()
        if args.profile_path:
            profiler.write(args.profile_path)


def write_report(args, report: dict) -> None:
    """--report: the JSON report, written atomically (values numpy made are made plain)."""
    if args.report:
        write_atomic(args.report, json.dumps(report, indent=2, default=_jsonable), "report")
        print(f"report: {args.report}")


def _jsonable(x):
    import numpy as np
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def latency_stats(ms: list[float]) -> dict:
    """min / median / p90 / max / mean and every value, in the unit given (ms)."""
    a = np.asarray(ms, dtype=np.float64)
    return {"min": float(a.min()), "median": float(np.median(a)),
            "p90": float(np.percentile(a, 90)), "max": float(a.max()), "mean": float(a.mean()),
            "all": [round(float(x), 4) for x in a]}


SAMPLE_BURST = 4   # consecutive timed iterations per sample; the first warms the timed plan


def breakdown_stride(iterations: int) -> int:
    """Every how many timed iterations one runs timed step by step (`Program.timed`) for the time
    breakdown: all of up to 31, then 1 in iterations // 16, at most 1 in 16, in bursts of
    SAMPLE_BURST (a method's timed plan is a plan of its own: run once in a while, it runs with
    cold caches). The others run untimed, as a program runs by default."""
    return max(1, min(16, iterations // 16))


def breakdown_sample(j: int, stride: int) -> tuple[bool, bool]:
    """(run timed, count in the breakdown) for timed iteration `j`: bursts of SAMPLE_BURST every
    SAMPLE_BURST * stride iterations, each burst's first not counted."""
    if stride == 1:
        return True, True
    phase = j % (SAMPLE_BURST * stride)
    return phase < SAMPLE_BURST, 0 < phase < SAMPLE_BURST


def time_breakdown(parts: list[tuple[float, float, float, int]], stride: int = 1) -> dict:
    """Medians per iteration of the time inside QNN graph execution, in CPU ops and the rest
    (qnnrt's own cost), from (wall, accelerator, cpu ops seconds, graph calls) per counted
    iteration (all, or the sample `breakdown_sample` picks)."""
    if not parts:
        return {}
    med = lambda xs: float(np.median(list(xs)))
    rt = [w - a - c for w, a, c, _ in parts]
    how = ("every timed iteration ran with a clock read around each graph call and CPU op "
           "(Program.timed)" if stride == 1 else
           f"1 in {stride} of the timed iterations ran with a clock read around each graph call and "
           f"CPU op (Program.timed), in bursts of {SAMPLE_BURST} whose first is not counted; the "
           f"others untimed")
    return {"accelerator_ms": round(med(p[1] for p in parts) * 1e3, 6),
            "cpu_ops_ms": round(med(p[2] for p in parts) * 1e3, 6),
            "runtime_ms": round(med(rt) * 1e3, 6),
            "runtime_us_per_graph_call": round(med(r / max(1, p[3]) for r, p in zip(rt, parts))
                                               * 1e6, 3),
            "graph_calls_per_iteration": int(med(p[3] for p in parts)),
            "sampled_iterations": len(parts), "sample_every": stride, "how": how}


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-for-bit repeat check; NaN in the same places counts as equal."""
    return np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" and b.dtype.kind in "fc")


def _exec_profiler(level: str):
    if level == "off":
        return None
    from qnnrt.profiling.exec_profile import ExecutionProfiler
    return ExecutionProfiler(level)


def print_performance(r: dict) -> None:
    """The performance line of a summary, and once each optimization that was asked for but is off."""
    perf = r.get("performance")
    if perf is None:
        return
    print(f"  {perf['summary']}")
    for note in perf["notes"]:
        print(f"  note: {note}")


def print_recoveries(rec: dict) -> None:
    """The summary's count of recovered graph-call failures (each was a warning when it happened)."""
    if not rec["tried"]:
        return
    print(f"  recoveries: {rec['succeeded']} of {rec['tried']} succeeded (budget {rec['max_recoveries']})")
    for x in rec["records"]:
        print(f"    graph {x['graph']!r} iteration {x['iteration']}: QNN error {x['code']} ({x['code_name']}), "
              f"re-created {x['recreated']} ({', '.join(x['contexts'])}) in {x['seconds'] * 1e3:.1f} ms"
              f"{'' if x['succeeded'] else ', failed again'}")


def heartbeat(off: bool, label: str, status):
    """A progress line every progress_interval() s on stderr, unless `off`."""
    import contextlib
    if off:
        return contextlib.nullcontext()
    return Heartbeat(label, status, progress_interval())
