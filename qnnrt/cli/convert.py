"""``qnnrt convert MODEL -o BUNDLE``: a Hugging Face folder or a GGUF file to a Genie bundle.

    qnnrt convert SmolLM2-135M-Instruct -o smollm2 --context 1024
    qnnrt convert model.gguf -o bundle --precision w8a16 --calibration text.txt
"""
from __future__ import annotations

import argparse
from pathlib import Path


def _parts(text: str) -> str | int:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"give 'auto' or a number, not {text!r}") from None


def _size(text: str) -> int:
    from qnnrt.errors import QnnrtError
    from qnnrt.units import parse_size
    try:
        return parse_size(text, "--part-budget")
    except QnnrtError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "convert", help="convert a Hugging Face folder or GGUF LLM into a Genie bundle",
        description="Convert an LLM (Llama family, Qwen2 / Qwen2.5, Qwen3; a Hugging Face folder with "
                    "safetensors, or a GGUF file) into a Genie bundle (genie_config.json, part context "
                    "binaries, tokenizer) that `qnnrt llm / serve` and Qualcomm's libGenie.so run. "
                    "Compiled parts are cached, so a repeated or interrupted conversion resumes.")
    p.add_argument("model", metavar="MODEL", help="a Hugging Face model folder or a .gguf file")
    p.add_argument("-o", "--output", required=True, metavar="BUNDLE", help="the bundle folder to write")
    p.add_argument("--soc", default=None, metavar="NAME|NUMBER", help="target SoC, e.g. SM8550 (default)")
    p.add_argument("--precision", default="fp16", choices=["fp16", "w8a16", "w4a16"],
                   help="fp16 (default), w8a16 (8-bit weights, 16-bit activations, 8-bit KV cache), "
                        "w4a16 (as w8a16 with 4-bit weights in blocks of 32)")
    p.add_argument("--context", type=int, default=None, metavar="N",
                   help="context length (default: 2048, at most the model's max positions)")
    p.add_argument("--prompt-ar", type=int, default=None, metavar="N",
                   help="tokens per prompt-graph call (default 128, at most half the context)")
    p.add_argument("--parts", type=_parts, default="auto", metavar="auto|N",
                   help="context binaries to split the layers into (auto: each compiled part's PD need, "
                        "predicted from its binary, under --part-budget)")
    p.add_argument("--part-budget", type=_size, default=None, metavar="SIZE",
                   help="the PD need each auto part stays under, e.g. 512MiB, at most one PD (default 1GiB, "
                        "raised to what one layer with a large embedding or head needs): smaller parts compile "
                        "in less memory and load in smaller steps")
    p.add_argument("--calibration", type=Path, default=None, metavar="FILE",
                   help="text to calibrate a quantized precision on (default: a built-in text)")
    p.add_argument("--weight-sharing", default="auto", choices=["auto", "on", "off"],
                   help="prompt and token graphs share weights (auto: on a device target, off on the x86 "
                        "simulator, which cannot load such binaries)")
    p.add_argument("--tokenizer", type=Path, default=None, metavar="FILE",
                   help="a tokenizer.json to use instead of the model's (e.g. for a GGUF whose tokenizer "
                        "qnnrt does not rebuild)")
    p.add_argument("--cache-dir", type=Path, default=None, metavar="DIR", help="compile cache folder")
    p.add_argument("--lora-rank", type=int, default=None, metavar="R",
                   help="LoRA adapters of rank R as graph inputs (fp16; `qnnrt llm/serve --lora`)")
    p.add_argument("--lora-targets", default="", metavar="q_proj,k_proj,...",
                   help="the projections taking an adapter: q_proj k_proj v_proj o_proj gate_proj up_proj "
                        "down_proj, comma-separated")
    p.add_argument("--force", action="store_true", help="replace BUNDLE if it exists")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run_convert)
    return p


def run_convert(args) -> int:
    from qnnrt.convert import ConvertOptions, convert
    from qnnrt.convert.lora import parse_targets
    options = ConvertOptions(soc=args.soc, precision=args.precision, context=args.context,
                             prompt_ar=args.prompt_ar, parts=args.parts, part_budget=args.part_budget,
                             calibration=args.calibration,
                             weight_sharing=args.weight_sharing, tokenizer=args.tokenizer,
                             cache_dir=args.cache_dir, progress=not args.quiet, lora_rank=args.lora_rank,
                             lora_targets=parse_targets(args.lora_targets))
    report = convert(args.model, args.output, options, overwrite=args.force)
    from qnnrt.units import format_bytes
    print(f"{report.bundle}: {len(report.bins)} part(s), {report.cached_parts} from the cache, "
          f"{report.seconds:.1f} s; predicted PD needs: {', '.join(format_bytes(n) for n in report.pd_needs)}")
    return 0
