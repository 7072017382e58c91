"""`qnnrt run PATH`: load a program / binary / .pte, run a method N times, report latency."""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from qnnrt._capi.types import LOG_LEVEL_NAMES
from qnnrt.cli.io_files import (output_bytes, parse_inputs_arg, random_inputs, read_input_list,
                                set_max_input_bytes, write_outputs)
from qnnrt.core.profile import PROFILE_LEVELS
from qnnrt.errors import QnnrtError
from qnnrt.units import format_bytes
from qnnrt.fileio import check_free_space, check_output_dir, check_writable, write_atomic
from qnnrt.progress import Heartbeat, ProgressBar
from qnnrt.runtime.recovery import DEFAULT_MAX_RECOVERIES


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run a method of a program, binary or .pte and time it")
    p.add_argument("path", help="program folder, EPContext .onnx, context binary .bin or .pte")
    m = p.add_mutually_exclusive_group()
    m.add_argument("--method", help="method name (default: the only one, or 'forward'); a comma "
                                    "list (prefill,decode) runs them in turn, one per iteration")
    m.add_argument("--method-index", type=int, help="method by position")
    m.add_argument("--graph", help="for a .bin: the graph to run (default: the first)")
    p.add_argument("--inputs", action="append",
                   help="comma-separated .npy/.raw files in input order, or name:=path; with "
                        "several methods, once per method as METHOD=a.npy,b.npy")
    p.add_argument("--input-list", action="append",
                   help="QNN input list: one line of raw files per inference; with several "
                        "methods, once per method as METHOD=list.txt")
    p.add_argument("--iteration", type=int, default=1, help="timed iterations (default 1)")
    p.add_argument("--warm-up", type=int, default=0, help="untimed iterations first (default 0)")
    p.add_argument("--output-dir", help="write outputs: <name>.npy and output_<iter>_<idx>.raw")
    p.add_argument("--check-repeat", action="store_true",
                   help="fail unless every iteration's outputs equal the first's for equal inputs")
    p.add_argument("--seed", type=int, default=0, help="seed of random inputs (default 0)")
    add_runtime_options(p)
    p.set_defaults(func=run)


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
    """Write the trace (after every program closed: their frees are in it) and say where."""
    if tracer is None:
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
    with _heartbeat(quiet or tty, f"qnnrt {args.command}: loading", status):
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


def time_breakdown(parts: list[tuple[float, float, float, int]]) -> dict:
    """Medians per iteration of the time inside QNN graph execution, in CPU ops and the rest
    (qnnrt's own cost), from (wall, accelerator, cpu ops seconds, graph calls) per iteration."""
    if not parts:
        return {}
    med = lambda xs: float(np.median(list(xs)))
    rt = [w - a - c for w, a, c, _ in parts]
    return {"accelerator_ms": round(med(p[1] for p in parts) * 1e3, 6),
            "cpu_ops_ms": round(med(p[2] for p in parts) * 1e3, 6),
            "runtime_ms": round(med(rt) * 1e3, 6),
            "runtime_us_per_graph_call": round(med(r / max(1, p[3]) for r, p in zip(rt, parts))
                                               * 1e6, 3),
            "graph_calls_per_iteration": int(med(p[3] for p in parts))}


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-for-bit repeat check; NaN in the same places counts as equal."""
    return np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" and b.dtype.kind in "fc")


def _exec_profiler(level: str):
    if level == "off":
        return None
    from qnnrt.profiling.exec_profile import ExecutionProfiler
    return ExecutionProfiler(level)


def run(args) -> int:
    return traced(_run, args)


def _run(args, tracer) -> int:
    if args.iteration < 1 or args.warm_up < 0:
        raise QnnrtError("--iteration must be >= 1 and --warm-up >= 0")
    if args.graph and Path(args.path).suffix != ".bin" and not Path(args.path).is_file():
        raise QnnrtError("--graph applies to a context binary (.bin); use --method for programs")
    check_targets(args)  # before the work: a bad path never costs a load or a run
    set_max_input_bytes(args.max_input_bytes)
    t_start = time.perf_counter()
    prog, profiler = open_program(args, args.graph, tracer=tracer)
    prog.timed = True   # the report's time_breakdown: graph calls and CPU ops timed
    quiet, tty = getattr(args, "quiet", False), sys.stderr.isatty()
    try:
        load_s = time.perf_counter() - t_start
        names = args.method.split(",") if args.method else [args.method_index]
        methods = [prog.method(n) for n in names]
        method = methods[0]
        feeds = _feeds(args, methods)
        out_dir = Path(args.output_dir) if args.output_dir else None
        if out_dir is not None:  # now the output sizes are known: will they fit?
            check_free_space(out_dir, args.iteration * sum(output_bytes(m.outputs) for m in methods)
                             // len(methods), "outputs")
        latencies: list[float] = []
        first_output_s: float | None = None
        first_outputs: dict[tuple[str, int], dict[str, np.ndarray]] = {}
        per_method: dict[str, list[float]] = {m.name: [] for m in methods}
        parts: list[tuple[float, float, float, int]] = []  # per timed iteration: wall, acc, cpu, calls
        mismatches = []
        total = args.warm_up + args.iteration
        run_bar = ProgressBar("running") if tty and not quiet and total > 20 else None
        calls = max(1, len(method.graph_calls))
        state = {"it": 0, "calls0": prog.graph_calls}

        def status() -> str:
            pool = prog.pool.summary()
            return (f"iteration {min(state['it'] + 1, total)}/{total} ({state['it']} done), graph "
                    f"call {prog.graph_calls - state['calls0']}/{calls} of it, contexts created "
                    f"{pool['creates']} (of {pool['contexts_total']})")
        with _heartbeat(quiet or tty, "qnnrt run", status):
            for it in range(total):
                state["it"], state["calls0"] = it, prog.graph_calls
                m = methods[it % len(methods)]
                mfeeds = feeds[m.name]
                feed_index = (it // len(methods)) % len(mfeeds)
                t0 = time.perf_counter()
                outputs = prog.run(m.name, mfeeds[feed_index])
                dt = time.perf_counter() - t0
                if first_output_s is None:
                    first_output_s = time.perf_counter() - t_start
                timed = it >= args.warm_up
                if timed:
                    latencies.append(dt * 1e3)
                    per_method[m.name].append(dt * 1e3)
                    t = prog.timing
                    parts.append((dt, t.accelerator_s, t.cpu_ops_s, t.graph_calls))
                if args.check_repeat:
                    ref = first_outputs.setdefault((m.name, feed_index), outputs)
                    if ref is not outputs:
                        bad = [k for k in ref if not _same(ref[k], outputs[k])]
                        if bad:
                            mismatches.append((it, m.name, bad))
                if out_dir is not None and timed:
                    try:
                        write_outputs(out_dir, it - args.warm_up, outputs, npy=(it == total - 1))
                    except QnnrtError as e:  # e.g. a full disk: stop now, say what is complete
                        done = it - args.warm_up
                        raise QnnrtError(f"{e} Stopped at iteration {done}; the outputs of "
                                         f"{done} earlier iteration(s) in {out_dir} are complete.") from e
                if run_bar:
                    run_bar.update(it + 1, total)
            state["it"] = total
        if run_bar:
            run_bar.done()
        if first_output_s is None:  # unreachable: --iteration >= 1 is checked above
            raise QnnrtError("no iteration ran")
        lat = latency_stats(latencies)
        residency = prog.pool.summary()
        report = {
            "path": str(args.path), "method": ",".join(m.name for m in methods),
            "iterations": args.iteration,
            "warm_up": args.warm_up, "load_s": round(load_s, 6),
            "first_output_s": round(first_output_s, 6), "latency_ms": lat,
            "residency": residency,
            "outputs": [{"name": k, "dtype": str(v.dtype), "shape": list(v.shape)}
                        for k, v in outputs.items()],
            "check_repeat": ({"checked": True, "mismatches": len(mismatches)}
                             if args.check_repeat else {"checked": False}),
            "time_breakdown": time_breakdown(parts),
            "vetting": vetting_json(prog, args),
            "recoveries": prog.recovery.summary(),
        }
        if len(methods) > 1:
            report["latency_ms_per_method"] = {k: latency_stats(v) for k, v in per_method.items() if v}
    finally:
        prog.close()
    add_profiles(report, prog, profiler, args)
    _print_summary(report, method, out_dir, profiler, args)
    write_report(args, report)
    if mismatches:
        it, name, outs = mismatches[0]
        raise QnnrtError(f"--check-repeat failed: {len(mismatches)} iteration(s) differ from the "
                         f"first with the same inputs (first: iteration {it}, method {name}, "
                         f"outputs {outs})")
    return 0


def _split_per_method(values: list[str] | None, names: list[str], flag: str) -> dict[str, str]:
    """`--inputs a.npy,b.npy` (one method) or `--inputs M=a.npy,...` per method -> {method: text}."""
    out: dict[str, str] = {}
    for v in values or []:
        head, sep, rest = v.partition("=")
        if sep and head in names and ":" not in head and "/" not in head:
            if head in out:
                raise QnnrtError(f"{flag} given twice for method {head!r}")
            out[head] = rest
        elif len(names) == 1 and not out:
            out[names[0]] = v
        else:
            raise QnnrtError(f"{flag} {v!r}: with several methods (or {flag} given more than once) "
                             f"write {flag} METHOD=..., METHOD one of {names}")
    return out


def _feeds(args, methods) -> dict[str, list]:
    """Inputs per method: --inputs / --input-list (per method), seeded random for the rest."""
    names = [m.name for m in methods]
    inputs = _split_per_method(args.inputs, names, "--inputs")
    lists = _split_per_method(args.input_list, names, "--input-list")
    both = sorted(set(inputs) & set(lists))
    if both:
        raise QnnrtError(f"method(s) {both}: give --inputs or --input-list, not both")
    feeds: dict[str, list] = {}
    random_for = []
    for m in methods:
        if m.name in feeds:
            continue
        if m.name in inputs:
            feeds[m.name] = parse_inputs_arg(inputs[m.name], m.inputs)
        elif m.name in lists:
            feeds[m.name] = read_input_list(lists[m.name], m.inputs)
        else:
            feeds[m.name] = [random_inputs(m.inputs, args.seed)]
            random_for.append(m.name)
    if random_for:
        print(f"note: no inputs given for {', '.join(random_for)}; using seeded random inputs "
              f"(seed {args.seed})", file=sys.stderr)
    return feeds


def _heartbeat(off: bool, label: str, status):
    """A progress line every 10 s ($QNNRT_PROGRESS_INTERVAL) on stderr, unless `off`."""
    import contextlib
    import os
    if off:
        return contextlib.nullcontext()
    return Heartbeat(label, status, float(os.environ.get("QNNRT_PROGRESS_INTERVAL", "10")))


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


def _print_summary(r: dict, method, out_dir, profiler, args) -> None:
    lat, res = r["latency_ms"], r["residency"]
    print(f"{r['path']}: method {r['method']} ({len(method.graph_calls)} QNN graph call(s) per "
          f"iteration, {res['contexts_total']} context(s))")
    print(f"  load {r['load_s'] * 1e3:.1f} ms, first output {r['first_output_s'] * 1e3:.1f} ms")
    print(f"  latency over {r['iterations']} iteration(s) (+{r['warm_up']} warm-up): "
          f"min {lat['min']:.3f} ms, median {lat['median']:.3f} ms, p90 {lat['p90']:.3f} ms, "
          f"max {lat['max']:.3f} ms")
    v = r["vetting"]
    if v["binaries"]:
        where = (f"{v['watched_in_worker']} noted in the worker process, no child"
                 if v["mode"] == "worker" else
                 f"{v['vetted_in_child']} in {v['children']} child process(es) "
                 f"({v['child_seconds']:.1f} s, {v['graphs_executed']} graph(s) run on zeros), "
                 f"{v['cached']} cached")
        print(f"  vetting {v['mode']}: {v['binaries']} binaries qnnrt did not write: {where}")
    tb = r.get("time_breakdown")
    if tb:
        print(f"  time per iteration (median): inside QNN graph execution {tb['accelerator_ms']:.3f} "
              f"ms, CPU ops {tb['cpu_ops_ms']:.3f} ms, qnnrt runtime {tb['runtime_ms']:.3f} ms "
              f"({tb['runtime_us_per_graph_call']:.1f} us per graph call)")
    cap = res["capacity_found"]
    print(f"  residency {res['policy']}: peak live {res['peak_live']}/{res['contexts_total']}, "
          f"creates {res['creates']}, evictions {res['evictions']}, reloads {res['reloads']}"
          + (f", PD capacity found {cap} context(s) ({res['pd_failures_handled']} PD failure(s) "
             f"handled)" if cap else ""))
    if res.get("pd_workers"):
        print(f"    HTP devices: {res['pd_devices']}")
    for pd in res.get("pd_workers") or []:
        channel = ("no channel" if pd["in_process"] else
                   f"{pd['round_trips']} round trip(s) for {pd['graph_calls']} graph call(s), channel "
                   f"{pd['channel_us_per_round_trip']} us per round trip")
        votes = pd.get("performance")
        if votes and votes["mode"] != "default":
            channel += (f", vote {votes['mode']}: {votes['accepted']}/{votes['calls']} calls accepted"
                        + (f" ({votes['unavailable']})" if votes["unavailable"] else ""))
        print(f"    PD {pd['pd']} ({pd['where']}): {pd['contexts']} context(s) {pd['first']} .. "
              f"{pd['last']}, PD predicted {format_bytes(pd['pd_predicted_bytes'])}, QNN-reported "
              f"{format_bytes(pd['pd_reported_bytes'])}, creates {pd['creates']}, {channel}")
    for name, st in r.get("latency_ms_per_method", {}).items():
        print(f"    {name}: median {st['median']:.3f} ms over {len(st['all'])} iteration(s)")
    if res.get("pd_estimate_total_bytes") or res.get("pd_predicted_total_bytes"):
        print(f"  PD (accelerator address space): all contexts predicted "
              f"{format_bytes(res.get('pd_predicted_total_bytes'))}; peak live predicted "
              f"{format_bytes(res.get('pd_peak_predicted_bytes'))}, QNN-reported "
              f"{format_bytes(res['pd_peak_bytes'])}"
              + (f"; {len(res['pd_mismatches'])} context(s) where QNN reported another size than "
                 f"predicted" if res.get("pd_mismatches") else ""))
    if res.get("pd_budget_bytes") is not None:
        src = {"found": "found by a PD failure this run, remembered for the next runs",
               "simulator": "the x86 simulator's PD, measured",
               "learned": "learned on this backend earlier", "override": "given by --pd-budget"}
        print(f"  PD budget {res['pd_budget_bytes']} B ({format_bytes(res['pd_budget_bytes'])}, "
              f"{src.get(res.get('pd_budget_source') or '', res.get('pd_budget_source') or 'bounded')})")
    print_performance(r)
    print_recoveries(r["recoveries"])
    if args.check_repeat:
        print(f"  check-repeat: {r['check_repeat']['mismatches']} mismatching iteration(s)")
    if out_dir is not None:
        print(f"  outputs written to {out_dir}/ (output_<iteration>_<index>.raw, <name>.npy)")
    if "heap" in r and args.heap_profiling_path:
        print(f"  heap profile: {args.heap_profiling_path} (+ .json)")
    if profiler is not None:
        print(profiler.summary_table())
