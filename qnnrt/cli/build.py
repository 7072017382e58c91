"""``qnnrt build``: the command line of the builder.

    qnnrt build MODEL.onnx -o OUT [--cpu-ops MatMul,Gemm] [--graphs-per-context N] [--soc SM8550|43]
    qnnrt build prefill.onnx decode.onnx --method-names prefill,decode -o OUT
    qnnrt build --demo tiny|pd [--two-method] -o OUT
"""
from __future__ import annotations

import argparse
from pathlib import Path

from qnnrt.errors import BuildError


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "build", help="partition ONNX model(s) into HTP graphs + CPU ops and write a program",
        description="Partition ONNX model(s): nodes of --cpu-ops and nodes the QNN EP rejects run on the "
                    "CPU, the rest is cut into maximal acyclic HTP partitions, compiled with ONNX Runtime's "
                    "QNN EP into context binaries (cached), and written as a qnnrt program folder.")
    p.add_argument("models", nargs="*", metavar="MODEL.onnx",
                   help="one model per method (several: same structure, e.g. prefill and decode)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="program folder to write")
    p.add_argument("--demo", choices=["tiny", "pd"], help="build a demo model instead of MODEL.onnx")
    p.add_argument("--two-method", action="store_true", help="with --demo: prefill + decode methods")
    p.add_argument("--method-names", metavar="A,B", help="method names, one per model "
                   "(default: forward for one model, else the file stems)")
    p.add_argument("--cpu-ops", metavar="OP,OP", default=None,
                   help="op types to keep on the CPU, e.g. MatMul,Gemm (demo default: MatMul)")
    p.add_argument("--graphs-per-context", type=int, default=1, metavar="N",
                   help="partitions per context binary (default 1: one binary per partition)")
    p.add_argument("--soc", default=None, metavar="NAME|NUMBER",
                   help="target SoC, e.g. SM8550 (default) or a QNN soc_model number")
    p.add_argument("--htp-arch", type=int, default=None, metavar="N", help="override the HTP arch (e.g. 73)")
    p.add_argument("--precision", default="fp16", choices=["fp16", "fp32"],
                   help="float precision on the HTP (default fp16)")
    p.add_argument("--htp-performance-mode", metavar="MODE", default=None,
                   help="record this HTP performance vote in program.json as the program's default "
                        "(run / llm --htp-performance-mode still override it)")
    p.add_argument("--no-probe", action="store_true",
                   help="do not ask the QNN EP which ops it takes: every op not in --cpu-ops goes to the HTP")
    p.add_argument("--no-cache", action="store_true", help="compile everything, do not use the cache")
    p.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="compile cache (default $QNNRT_CACHE_DIR, $XDG_CACHE_HOME/qnnrt or ~/.cache/qnnrt)")
    p.add_argument("--progress", dest="progress", action="store_true", default=True,
                   help="show progress (the default): a bar on a terminal, else a line every "
                        "$QNNRT_PROGRESS_INTERVAL s (10) with the count and ETA")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(func=run_build)
    return p


def run_build(args) -> int:
    from qnnrt.compiler.builder import BuildOptions, build_demo, build_program
    from qnnrt.compiler.compile import resolve_soc
    from qnnrt.compiler import demo
    from qnnrt.runtime.performance import check_mode
    mode = check_mode(args.htp_performance_mode, "--htp-performance-mode") \
        if args.htp_performance_mode else None
    options = BuildOptions(
        cpu_ops=tuple(_csv(args.cpu_ops)) if args.cpu_ops is not None else (),
        graphs_per_context=args.graphs_per_context,
        compile=resolve_soc(args.soc, args.htp_arch, args.precision),
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        use_cache=not args.no_cache, probe=not args.no_probe, progress=args.progress,
        performance_mode=mode)
    if args.demo:
        if args.models:
            raise BuildError("give either MODEL.onnx or --demo, not both")
        if args.method_names:
            raise BuildError("--method-names does not apply to --demo (its methods are forward, or prefill,decode)")
        if args.cpu_ops is None:
            options.cpu_ops = demo.demo_config(args.demo).cpu_ops
        report = build_demo(args.demo, args.output, two_method=args.two_method, options=options)
    else:
        if not args.models:
            raise BuildError("no model given: qnnrt build MODEL.onnx -o OUT (or --demo tiny)")
        if args.two_method:
            raise BuildError("--two-method applies to --demo; give two models for a two-method program")
        if args.method_names:
            names = _csv(args.method_names)
            if len(names) != len(args.models):
                raise BuildError(f"--method-names has {len(names)} name(s) for {len(args.models)} model(s)")
        elif len(args.models) == 1:
            names = ["forward"]
        else:
            names = [Path(m).stem for m in args.models]
        report = build_program(list(zip(names, args.models)), args.output, options)
    print(report.format())
    return 0
