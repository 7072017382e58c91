"""`qnnrt demo`: build a demo LLM-shaped program once (cached) and run it, showing what qnnrt does.

`--preset tiny` (default): 16 layers, MatMuls on the CPU, ~66 context binaries.
`--preset pd`: so many contexts that creating them all up front exhausts the accelerator's PD; the
demo first shows that failure (residency eager, what other runtimes do), then runs under auto.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from qnnrt._capi.types import LOG_LEVEL_NAMES
from qnnrt.errors import QnnError, QnnrtError
from qnnrt.units import format_bytes
from qnnrt.cli.run_common import add_performance_options, add_trace_options, traced


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="build (once) and run a demo program: the first thing to try")
    p.add_argument("--preset", default="tiny", choices=["tiny", "pd"])
    p.add_argument("--iteration", type=int, default=None,
                   help="timed iterations (default: 3 for tiny, 2 for pd)")
    p.add_argument("--residency", default="auto", help="residency policy (default auto)")
    p.add_argument("--output-dir", help="where outputs, heap profile and report go "
                                        "(default: next to the cached program)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the program even if cached")
    p.add_argument("--skip-eager", action="store_true",
                   help="pd preset: do not first show the eager (create-all) failure")
    p.add_argument("--log-level", default="warn",
                   choices=LOG_LEVEL_NAMES)
    add_performance_options(p)
    add_trace_options(p)
    p.set_defaults(func=run)


def demo_program(preset: str, rebuild: bool = False) -> Path:
    """The demo program folder in the user's cache, built on first use."""
    from qnnrt.compiler.builder import BuildOptions, build_demo
    from qnnrt.compiler.demo import demo_config
    from qnnrt.fileio import default_cache_dir
    from qnnrt.formats.program import read_program
    out = default_cache_dir() / "demo" / preset
    if not rebuild and (out / "program.json").is_file():
        try:
            read_program(out)
            return out
        except QnnrtError:
            pass  # damaged: rebuild it
    print(f"building the {preset!r} demo program into {out} (once; later runs reuse it) ...",
          flush=True)
    # a line every few seconds where stderr is no terminal: the pd preset compiles for minutes
    report = build_demo(preset, out, options=BuildOptions(cpu_ops=demo_config(preset).cpu_ops, progress=True))
    print(report.format(), flush=True)
    return out


def _reference(program: Path) -> tuple[dict, dict]:
    from qnnrt.compiler.demo import demo_inputs, reference_outputs
    import onnx
    model = onnx.load(str(program / "reference" / "forward.onnx"))
    inputs = demo_inputs(model)
    return inputs, reference_outputs(model, inputs)


def next_commands(program: Path, preset: str) -> str:
    """What to run next: the program with every profile that fills `qnnrt plot`'s panels (heap
    timeline, latency histogram, per-graph time), its report plotted, and its trace."""
    import importlib.util
    from qnnrt.install import install_command
    iterations = 10 if preset == "tiny" else 2
    # the plot needs the `plot` extra: where it is missing, the command installs it first
    install = "" if importlib.util.find_spec("matplotlib") is not None else f"{install_command('plot')} && "
    return (f"qnnrt run {program} --iteration {iterations} --heap-profiling-path heap.txt "
            f"--profile-level basic --report r.json --trace trace.json && {install}qnnrt plot r.json")


def run(args) -> int:
    return traced(_run, args)


def _run(args, tracer) -> int:
    from qnnrt.cli.io_files import write_outputs
    from qnnrt.cli.run_common import latency_stats, performance_options
    from qnnrt.loader import LoadOptions, load
    preset = args.preset
    iterations = args.iteration if args.iteration is not None else (3 if preset == "tiny" else 2)
    if iterations < 1:
        raise QnnrtError("--iteration must be >= 1")
    program = demo_program(preset, args.rebuild)
    out_dir = Path(args.output_dir) if args.output_dir else program.parent / f"{preset}-outputs"
    from qnnrt.fileio import check_output_dir, check_writable
    check_output_dir(out_dir, "demo outputs")  # writable, free space: before any load
    check_writable(out_dir / "heap.txt", "heap profile")
    inputs, reference = _reference(program)

    if preset == "pd" and not args.skip_eager:
        print("\n1) residency eager: create every context up front (what ExecuTorch / ORT do)")
        t0 = time.perf_counter()
        try:
            with load(program, residency="eager", options=LoadOptions(log_level=args.log_level,
                                                                        trace=tracer)):
                print("   all contexts fit (this machine's PD budget is larger than expected)")
        except QnnError as e:
            first = str(e).splitlines()[0]
            pd_line = next((l for l in e.log_tail if "available PD" in l), "")
            print(f"   failed after {time.perf_counter() - t0:.1f} s: {first}")
            if pd_line:
                print(f"   QNN: {pd_line.strip()}")
        print("\n2) residency auto (qnnrt's default)")

    heap_path = out_dir / "heap.txt"
    t0 = time.perf_counter()
    with load(program, residency=args.residency,
              options=LoadOptions(log_level=args.log_level, heap_profiling_path=str(heap_path),
                                  trace=tracer, **performance_options(args))) as prog:
        method = prog.method("forward")
        latencies: list[float] = []
        first_s: float | None = None
        outputs: dict[str, np.ndarray] | None = None
        for it in range(iterations):
            t = time.perf_counter()
            outputs = prog.run(method.name, inputs)
            latencies.append((time.perf_counter() - t) * 1e3)
            first_s = first_s or (time.perf_counter() - t0)
            write_outputs(out_dir, it, outputs, npy=(it == iterations - 1))
            print(f"   iteration {it}: {latencies[-1]:.1f} ms", flush=True)
        res = prog.pool.summary()
    perf = prog.performance.to_json() if prog.performance is not None else None
    if outputs is None:  # unreachable: iterations >= 1 is checked above
        raise QnnrtError("no iteration ran")
    err = max(float(np.abs(outputs[k] - reference[k]).max()) for k in reference)
    lat = latency_stats(latencies)
    print(f"\nqnnrt demo ({preset}): {program}")
    print(f"  contexts      {res['contexts_total']} context binaries, one QNN graph call each "
          f"per iteration; {method.describe()['cpu_segments']} CPU segments (ONNX Runtime)")
    from qnnrt.runtime.residency.budget import SIMULATOR_CAPACITY
    total = res.get("pd_predicted_total_bytes") or res["pd_estimate_total_bytes"]
    print(f"  PD need       {format_bytes(total)} summed over all contexts (predicted from the binaries, "
          f"{len(res['pd_mismatches'])} differ from QNN's own figure; the simulator's PD budget is "
          f"{format_bytes(SIMULATOR_CAPACITY)})")
    cap = res["capacity_found"]
    print(f"  residency     {res['policy']}: peak live {res['peak_live']}, creates {res['creates']}, "
          f"evictions {res['evictions']}, reloads {res['reloads']}, prefetches "
          f"{res['prefetches']}" + (f"; PD full at {cap} live contexts, handled "
                                    f"({res['pd_failures_handled']} failure(s) absorbed)"
                                    if cap else ""))
    for pd in res.get("pd_workers") or []:  # multi-PD: every context resident, PD 0 in this process
        print(f"  PD {pd['pd']}          {pd['contexts']} contexts {pd['first']} .. {pd['last']} in "
              f"{pd['where']}, {format_bytes(pd['pd_predicted_bytes'])} of PD, created once")
    print(f"  latency       first output {first_s:.2f} s; per iteration min {lat['min']:.1f} / "
          f"median {lat['median']:.1f} / p90 {lat['p90']:.1f} / max {lat['max']:.1f} ms")
    print(f"  accuracy      max |qnnrt - float32 reference| = {err:.4f} (fp16 on the HTP)")
    print(f"  outputs       {out_dir}/ (output_<iteration>_<index>.raw, <name>.npy)")
    print(f"  heap profile  {heap_path} (+ .json timeline)")
    if perf is not None:
        print(f"  performance   {perf['summary']}")
        for note in perf["notes"]:
            print(f"  note          {note}")
    print(f"\nnext: {next_commands(program, preset)}")
    return 0
