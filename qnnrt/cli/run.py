"""`qnnrt run PATH`: load a program / binary / .pte, run a method N times, report latency."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from qnnrt.cli.io_files import (output_bytes, parse_inputs_arg, random_inputs, read_input_list,
                                set_max_input_bytes, write_outputs)
from qnnrt.errors import QnnrtError
from qnnrt.units import format_bytes
from qnnrt.fileio import check_free_space
from qnnrt.progress import ProgressBar


from qnnrt.cli.run_common import (add_profiles, add_runtime_options, breakdown_sample, breakdown_stride,
                                  check_targets, heartbeat, latency_stats, open_program, print_performance,
                                  print_recoveries, same, time_breakdown, traced, vetting_json, write_report)


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
    # the report's time_breakdown times graph calls and CPU ops step by step on a sample of the
    # iterations only (breakdown_stride): the clock reads around every step cost ~15 % of the
    # runtime's own work per graph call (bench/RESULTS.md, issue 49)
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
        stride = breakdown_stride(args.iteration)
        with heartbeat(quiet or tty, "qnnrt run", status):
            for it in range(total):
                state["it"], state["calls0"] = it, prog.graph_calls
                m = methods[it % len(methods)]
                mfeeds = feeds[m.name]
                feed_index = (it // len(methods)) % len(mfeeds)
                timed = it >= args.warm_up
                # sampled: timed step by step; of the warm-up, all when every iteration is timed,
                # else the last (builds the timed plan; the others warm the untimed one)
                sampled, counted = (breakdown_sample(it - args.warm_up, stride) if timed else
                                    (stride == 1 or (args.warm_up > 1 and it == args.warm_up - 1), False))
                if sampled:
                    prog.timed = True
                t0 = time.perf_counter()
                outputs = prog.run(m.name, mfeeds[feed_index])
                dt = time.perf_counter() - t0
                if first_output_s is None:
                    first_output_s = time.perf_counter() - t_start
                if timed:
                    latencies.append(dt * 1e3)
                    per_method[m.name].append(dt * 1e3)
                if sampled:
                    prog.timed = False
                    if counted:
                        t = prog.timing
                        parts.append((dt, t.accelerator_s, t.cpu_ops_s, t.graph_calls))
                if args.check_repeat:
                    ref = first_outputs.setdefault((m.name, feed_index), outputs)
                    if ref is not outputs:
                        bad = [k for k in ref if not same(ref[k], outputs[k])]
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
            "time_breakdown": time_breakdown(parts, stride),
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
        sample = (f"of {tb['sampled_iterations']} sampled, 1 in {tb['sample_every']} timed step by step"
                  if tb["sample_every"] > 1 else "timed step by step")
        print(f"  time per iteration (median {sample}): inside QNN graph execution "
              f"{tb['accelerator_ms']:.3f} ms, CPU ops {tb['cpu_ops_ms']:.3f} ms, qnnrt runtime "
              f"{tb['runtime_ms']:.3f} ms ({tb['runtime_us_per_graph_call']:.1f} us per graph call)")
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
