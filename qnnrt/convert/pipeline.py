"""`qnnrt.convert(MODEL, OUT)`: read the model, plan its parts, write and compile each part's
prompt and token graphs (cached by content), write the Genie bundle's files into a temporary
folder beside OUT and rename it to OUT once everything is there (no half bundle under the final
name), with a record of the source's hash, the options and the tool versions."""
from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from qnnrt.compiler.compile import CompileCache, resolve_soc, toolchain_versions
from qnnrt.compiler.external import ExternalWeights
from qnnrt.convert.bundle_files import genie_config, htp_config, tokenizer_config
from qnnrt.convert.compile_parts import PartCache, compile_combined, compile_shared
from qnnrt.convert.graphs import PartPlan, part_model, split_layers
from qnnrt.convert.options import PART_BUDGET, ConvertOptions
from qnnrt.convert.source import Source, open_model
from qnnrt.convert.spec import ConvertError, ModelSpec
from qnnrt.convert.steps import Steps
from qnnrt.fileio import default_cache_dir
from qnnrt.formats.lora import CONVERT_RECORD
from qnnrt.progress import Heartbeat

RECORD_NAME = CONVERT_RECORD


@dataclass(frozen=True)
class ConvertReport:
    """What a conversion wrote: the bundle folder, its part binaries, the seconds it took, how many
    parts came from the cache."""
    bundle: Path
    bins: tuple[str, ...]
    seconds: float
    cached_parts: int
    record: dict


def _part_need(spec: ModelSpec, layers: int, context: int, copies: int, ends: int) -> int:
    """Predicted PD bytes of a part of ``layers`` layers: fp16 weights once per graph that holds its
    own copy, plus float32 KV I/O of both graphs; ``ends`` adds the embedding / head."""
    H, D, F = spec.hidden, spec.head_dim, spec.ffn
    per_layer = H * D * (spec.heads * 2 + spec.kv_heads * 2) + 3 * H * F
    weights = 2 * (layers * per_layer + ends * spec.vocab * H)
    kv = layers * 2 * spec.kv_heads * D * context * 4 * 2
    return copies * weights + kv


def plan_parts(spec: ModelSpec, options: ConvertOptions, context: int, shared: bool) -> PartPlan:
    """The layers of each part: ``options.parts``, or the fewest parts whose predicted need each
    stays under PART_BUDGET (auto)."""
    copies = 1 if shared else 2
    if options.parts != "auto":
        n = int(options.parts)
        if n > spec.layers:
            raise ConvertError(f"--parts {n}: the model has {spec.layers} layers; give at most {spec.layers}")
        return PartPlan(context, split_layers(spec.layers, n))
    for n in range(1, spec.layers + 1):
        bounds = split_layers(spec.layers, n)
        needs = [_part_need(spec, b - a, context, copies, (i == 0) + (i == n - 1)) for i, (a, b) in enumerate(bounds)]
        if max(needs) <= PART_BUDGET:
            return PartPlan(context, bounds)
    raise ConvertError(f"one layer of this model needs more than {PART_BUDGET >> 20} MiB of PD at context "
                       f"{context}; give a smaller --context")


def _check_tokenizer(src: Source) -> None:
    if src.tokenizer.tokenizer_json is None:
        raise ConvertError(f"{src.path}: no tokenizer.json; a bundle needs one (pass tokenizer=... / "
                           f"--tokenizer with the model's tokenizer.json)")


def _part_blob(src: Source, plan: PartPlan, part: int, ar: int, options: ConvertOptions, shared: bool,
               work: Path, cache: CompileCache, models_of) -> bytes:
    """The part's binary. Its graphs' weights go to one data file as they are written (the prompt and
    token graphs' shared once), so neither Python nor ONNX Runtime holds a copy per graph."""
    labels = [plan.graph_name("prompt", ar, part), plan.graph_name("token", 1, part)]
    data = Path(tempfile.mkdtemp(prefix=f"part{part}-", dir=work))
    try:
        store = ExternalWeights(data / "weights.bin")
        models = [models_of(part, ar, store), models_of(part, 1, store)]
        copt = resolve_soc(options.soc)
        if shared:
            return compile_shared(models, labels, copt, work, data)
        return compile_combined(models, labels, copt, cache, work, data)
    finally:
        shutil.rmtree(data, ignore_errors=True)


def _finish(tmp: Path, out: Path, overwrite: bool) -> None:
    """Move the finished bundle to ``out`` (an existing one replaced only with ``overwrite``)."""
    if out.exists():
        if not overwrite:
            raise ConvertError(f"{out} exists; remove it or pass overwrite=True (--force)")
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


def convert(model: str | os.PathLike[str], output: str | os.PathLike[str],
            options: ConvertOptions | None = None, *, overwrite: bool = False) -> ConvertReport:
    """Convert ``model`` (a Hugging Face folder or a .gguf file) into the Genie bundle ``output``.

    Parameters: ``options`` (ConvertOptions: soc, precision, context, prompt_ar, parts, calibration,
    weight_sharing, tokenizer); ``overwrite``: replace an existing ``output``.
    Returns a ConvertReport. Raises ConvertError (bad input) or BuildError (a compile failed)."""
    options = options or ConvertOptions()
    out = Path(output).absolute()
    if out.exists() and not overwrite:
        raise ConvertError(f"{out} exists; remove it or pass overwrite=True (--force)")
    steps = Steps(1.0, enabled=options.progress is not False)
    src = open_model(model, options.tokenizer)
    _check_tokenizer(src)
    spec = src.spec
    context = options.context_for(spec)
    ar = options.prompt_ar_for(context)
    shared, sharing_why = options.sharing_on_host()
    plan = plan_parts(spec, options, context, shared)
    source_hash = src.sha256()
    steps.done(f"read {src.kind} {src.path.name}: {spec.architecture}, {spec.layers} layers, hidden "
               f"{spec.hidden}, vocab {spec.vocab}; {plan.parts} part(s), context {context}, prompt AR {ar}")
    weight_units = [_part_need(spec, b - a, 0, 1, (i == 0) + (i == plan.parts - 1)) for i, (a, b) in
                    enumerate(plan.bounds)]
    steps.total = float(sum(weight_units)) * (1.1 if options.precision == "fp16" else 1.6)
    copt = resolve_soc(options.soc)
    cache_root = Path(options.cache_dir) if options.cache_dir else default_cache_dir()
    ccache, pcache = CompileCache(cache_root), PartCache(cache_root)
    versions = toolchain_versions()
    from qnnrt import __version__
    versions["qnnrt"] = __version__
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        work = Path(tempfile.mkdtemp(prefix="work-", dir=tmp))
        models_of = _models(src, plan, options, ar, steps, work)
        bins, cached = _write_parts(src, plan, ar, options, shared, tmp, work, ccache, pcache, models_of, steps,
                                    weight_units, {"source": source_hash, "spec": spec.to_dict(),
                                                   "options": _options_record(options), "ar": ar,
                                                   "bounds": plan.bounds, "compile": copt.token(),
                                                   "calibration": _file_hash(options.calibration),
                                                   "versions": versions})
        eos = spec.eos
        # bos-token always (libGenie's schema requires it); qnnrt prepends it to a text that does not start
        # with it, as Genie does
        cfg = genie_config(spec, context, bins, src.tokenizer.generation, eos)
        _write_json(tmp / "genie_config.json", cfg)
        _write_json(tmp / "htp_backend_ext_config.json", htp_config(copt.soc_model, copt.htp_arch, shared))
        (tmp / "tokenizer.json").write_text(src.tokenizer.tokenizer_json or "", encoding="utf-8")
        _write_json(tmp / "tokenizer_config.json", tokenizer_config(src.tokenizer.chat_template,
                                                                    src.tokenizer.tokenizer_config))
        if src.tokenizer.chat_template is not None:
            (tmp / "chat_template.jinja").write_text(src.tokenizer.chat_template, encoding="utf-8")
        if src.tokenizer.generation:
            _write_json(tmp / "generation_config.json", src.tokenizer.generation)
        record = {"source": {"path": str(src.path), "kind": src.kind, "sha256": source_hash},
                  "architecture": spec.architecture, "spec": spec.to_dict(), "options": _options_record(options),
                  "context": context, "prompt_ar": ar, "parts": [list(b) for b in plan.bounds],
                  "weight_sharing": {"enabled": shared, "why": sharing_why},
                  "soc_model": copt.soc_model, "htp_arch": copt.htp_arch, "versions": versions,
                  "host": platform.machine(), "seconds": round(steps.elapsed, 1),
                  "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if options.lora_rank is not None:
            from qnnrt.convert.lora import slots_for
            record["lora"] = slots_for(spec, options.lora_rank, options.lora_targets).to_record()
        _write_json(tmp / RECORD_NAME, record)
        _finish(tmp, out, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    steps.note(f"wrote {out} ({len(bins)} part binaries, {cached} from the cache) in {steps.elapsed:.1f} s")
    return ConvertReport(out, tuple(bins), steps.elapsed, cached, record)


def _file_hash(path: Path | None) -> str | None:
    from qnnrt.fileio import file_sha256
    return file_sha256(path) if path is not None else None


def _options_record(options: ConvertOptions) -> dict:
    d = asdict(options)
    for k in ("cache_dir", "progress"):
        d.pop(k)
    if options.lora_rank is None:      # the part cache's key of a bundle without LoRA stays as it was
        d.pop("lora_rank"), d.pop("lora_targets")
    else:
        d["lora_targets"] = list(options.lora_targets)
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in d.items()}


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=4) + "\n", encoding="utf-8")


def _models(src: Source, plan: PartPlan, options: ConvertOptions, ar: int, steps: Steps, work: Path):
    """``models_of(part, ar, store)``: the part's ONNX (float, its weights written to ``store``; or
    quantized after calibrating once)."""
    if options.precision == "fp16":
        lora = None
        if options.lora_rank is not None:
            from qnnrt.convert.lora import LoraInputs, slots_for
            lora = LoraInputs(slots_for(src.spec, options.lora_rank, options.lora_targets))
        return lambda part, a, store: part_model(src.spec, plan, src.weights, a, part, lora=lora, store=store)
    from qnnrt.convert.quantize import quantized_models
    return quantized_models(src, plan, options, ar, steps, work)


def _write_parts(src: Source, plan: PartPlan, ar: int, options: ConvertOptions, shared: bool, tmp: Path,
                 work: Path, ccache: CompileCache, pcache: PartCache, models_of, steps: Steps, units: list[int],
                 key_base: dict) -> tuple[list[str], int]:
    name = src.path.stem.replace(" ", "_") or "model"
    bins, cached = [], 0
    for part in range(1, plan.parts + 1):
        fname = f"{name}_part_{part}_of_{plan.parts}.bin"
        key = pcache.key({**key_base, "part": part, "shared": shared})
        blob = pcache.get(key)
        if blob is None:
            status = f"writing and compiling part {part}/{plan.parts}"
            beat = Heartbeat("convert", status.__str__, interval=30.0) if steps.enabled \
                else contextlib.nullcontext()
            with beat:
                blob = _part_blob(src, plan, part, ar, options, shared, work, ccache, models_of)
            pcache.put(key, blob)
            how = "compiled"
        else:
            cached += 1
            how = "from the cache"
        (tmp / fname).write_bytes(blob)
        bins.append(fname)
        steps.done(f"part {part}/{plan.parts} {how}: layers {plan.bounds[part - 1][0]}.."
                   f"{plan.bounds[part - 1][1] - 1}, {len(blob) / 2**20:.1f} MiB", units[part - 1] *
                   (1.1 if options.precision == "fp16" else 1.6) * (1 if how == "compiled" else 1))
    shutil.rmtree(work, ignore_errors=True)
    return bins, cached


__all__ = ["ConvertOptions", "ConvertReport", "convert", "plan_parts"]
