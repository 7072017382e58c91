"""Where a conversion's memory goes: `qnnrt.convert` run in this process with its RSS sampled every 50 ms and a
line at each step (each part graph written, the compile unit's key, the combined model, ONNX Runtime's
session, the graph renaming): the RSS then, and the peak so far with the step it fell in.

    PYTHONPATH=. python bench/convert_memory_stages.py MODEL OUT [--context 256 --prompt-ar 32 --soc SM8650]

MODEL: a Hugging Face folder or a GGUF file (a folder whose config.json says fewer num_hidden_layers makes a
smaller model of the same kind: the reader takes the first layers). The compile cache is a fresh one in OUT.
"""
from __future__ import annotations

import argparse
import functools
import shutil
import threading
import time
from pathlib import Path

T0 = time.perf_counter()
PEAK = {"mib": 0, "step": "start"}
STEP = ["start"]


def rss_mib() -> int:
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS")) // 1024


def _sample() -> None:
    while True:
        r = rss_mib()
        if r > PEAK["mib"]:
            PEAK.update(mib=r, step=STEP[0])
        time.sleep(0.05)


def mark(step: str) -> None:
    STEP[0] = step
    print(f"[{time.perf_counter() - T0:7.1f} s] RSS {rss_mib():6d} MiB, peak {PEAK['mib']:6d} MiB "
          f"({PEAK['step']}) -> {step}", flush=True)


def _wrap(module, name: str) -> None:
    f = getattr(module, name)

    @functools.wraps(f)
    def marked(*a, **k):
        mark(f"{name} begins")
        out = f(*a, **k)
        mark(f"{name} ends")
        return out
    setattr(module, name, marked)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("out", type=Path)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--prompt-ar", type=int, default=32)
    ap.add_argument("--soc", default=None)
    args = ap.parse_args()
    threading.Thread(target=_sample, daemon=True).start()
    import onnxruntime as ort

    import qnnrt.compiler.compile as compile_mod
    import qnnrt.convert.compile_parts as parts_mod
    import qnnrt.convert.pipeline as pipeline_mod
    from qnnrt.convert import ConvertOptions, convert
    for module, name in ((compile_mod, "unit_key"), (compile_mod, "combine_members"), (parts_mod, "compile_unit"),
                         (parts_mod, "rename_in_binary"), (pipeline_mod, "part_model")):
        _wrap(module, name)

    class MarkedSession(ort.InferenceSession):
        def __init__(self, *a, **k) -> None:
            mark("ONNX Runtime session begins")
            super().__init__(*a, **k)
            mark("ONNX Runtime session ends")
    ort.InferenceSession = MarkedSession      # type: ignore[misc]
    cache = args.out.with_name(args.out.name + "_cache")
    shutil.rmtree(cache, ignore_errors=True)
    convert(args.model, args.out, ConvertOptions(soc=args.soc, context=args.context, prompt_ar=args.prompt_ar,
                                                 cache_dir=cache, progress=False), overwrite=True)
    mark("done")
    print(f"peak RSS {PEAK['mib']} MiB ({PEAK['step']})")


if __name__ == "__main__":
    main()
