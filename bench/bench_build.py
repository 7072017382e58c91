"""Build time of the demo programs, cold (empty compile cache) and cached.

    python bench/bench_build.py [--presets tiny,pd] [--two-method]

Each cold build uses a fresh temporary cache; the cached build repeats it with that cache. One build
at a time (the compiler is single-threaded per session; the machine is shared).
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="tiny,pd")
    ap.add_argument("--two-method", action="store_true")
    ap.add_argument("--graphs-per-context", type=int, default=1)
    args = ap.parse_args()
    from qnnrt.compiler import demo
    from qnnrt.compiler.builder import BuildOptions, build_demo
    rows = []
    for preset in [p for p in args.presets.split(",") if p]:
        cfg = demo.demo_config(preset)
        work = Path(tempfile.mkdtemp(prefix="bench-build-"))
        try:
            for label in ("cold", "cached"):
                opts = BuildOptions(cpu_ops=cfg.cpu_ops, graphs_per_context=args.graphs_per_context,
                                    cache_dir=work / "cache", progress=False)
                t = time.perf_counter()
                r = build_demo(preset, work / f"out_{label}", two_method=args.two_method, options=opts)
                dt = time.perf_counter() - t
                rows.append((preset, label, r.partitions, r.binaries, r.total_bytes, dt, r.compile_seconds,
                             r.cache_hits, r.cache_misses))
                print(f"{preset:5s} {label:6s} partitions={r.partitions} binaries={r.binaries} "
                      f"size={r.total_bytes / 2**20:.1f} MiB total={dt:.1f}s compile={r.compile_seconds:.1f}s "
                      f"hits={r.cache_hits} compiled={r.cache_misses}", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print("| demo | cache | partitions | binaries | binaries MiB | build s | of which compiling s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for p, label, parts, bins, size, dt, comp, hits, miss in rows:
        print(f"| {p} | {label} | {parts} | {bins} | {size / 2**20:.1f} | {dt:.1f} | {comp:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
