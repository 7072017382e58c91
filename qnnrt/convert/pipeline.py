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
from qnnrt.convert.graphs import PartPlan, part_model
from qnnrt.convert.options import ConvertOptions
from qnnrt.convert.sizing import PD_LIMIT, Sizing, at_least_one_layer, plan_parts, replan, weight_need
from qnnrt.convert.source import Source, open_model
from qnnrt.convert.spec import ConvertError
from qnnrt.convert.steps import Steps
from qnnrt.fileio import default_cache_dir
from qnnrt.formats.lora import CONVERT_RECORD
from qnnrt.progress import Heartbeat
from qnnrt.units import format_bytes

RECORD_NAME = CONVERT_RECORD


@dataclass(frozen=True)
class ConvertReport:
    """What a conversion wrote: the bundle folder, its part binaries, the seconds it took, how many
    parts came from the cache, each part's predicted PD need (bytes; None: the binary does not say)."""
    bundle: Path
    bins: tuple[str, ...]
    seconds: float
    cached_parts: int
    record: dict
    pd_needs: tuple[int | None, ...] = ()


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

    Parameters: ``options`` (ConvertOptions: soc, precision, context, prompt_ar, parts, part_budget,
    calibration, weight_sharing, tokenizer); ``overwrite``: replace an existing ``output``.
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
    sizing = at_least_one_layer(spec, context, shared, options.sizing())
    plan = plan_parts(spec, options.parts, context, shared, sizing)
    source_hash = src.sha256()
    if options.parts == "auto" and sizing.budget != options.sizing().budget:
        steps.note(f"part budget {format_bytes(sizing.budget)} instead of {format_bytes(options.sizing().budget)}: "
                   f"a part holds at least one layer, and the embedding's or the head's with one needs that")
    steps.done(f"read {src.kind} {src.path.name}: {spec.architecture}, {spec.layers} layers, hidden "
               f"{spec.hidden}, vocab {spec.vocab}; {plan.parts} part(s), context {context}, prompt AR {ar}")
    copt = resolve_soc(options.soc)
    cache_root = Path(options.cache_dir) if options.cache_dir else default_cache_dir()
    caches = CompileCache(cache_root), PartCache(cache_root)
    versions = toolchain_versions()
    from qnnrt import __version__
    versions["qnnrt"] = __version__
    key_base = {"source": source_hash, "spec": spec.to_dict(), "options": _options_record(options), "ar": ar,
                "compile": copt.token(), "calibration": _file_hash(options.calibration), "versions": versions}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        plan, done, pd = _all_parts(src, plan, sizing, ar, options, shared, tmp, caches, steps, key_base)
        bins = [p.name for p in done]
        cached = sum(p.cached for p in done)
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
                  "context": context, "prompt_ar": ar, "parts": [list(b) for b in plan.bounds], "pd": pd,
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
    return ConvertReport(out, tuple(bins), steps.elapsed, cached, record, tuple(p.need for p in done))


def _file_hash(path: Path | None) -> str | None:
    from qnnrt.fileio import file_sha256
    return file_sha256(path) if path is not None else None


def _options_record(options: ConvertOptions) -> dict:
    d = asdict(options)
    for k in ("cache_dir", "progress"):
        d.pop(k)
    if options.part_budget is None:     # the key of a part converted without --part-budget stays as it was
        d.pop("part_budget")
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


@dataclass(frozen=True)
class _Part:
    name: str
    need: int | None      # predicted PD bytes of its context
    cached: bool


class _OverBudget(Exception):
    def __init__(self, part: int, need: int) -> None:
        super().__init__(part, need)
        self.part, self.need = part, need


def _all_parts(src: Source, plan: PartPlan, sizing: Sizing, ar: int, options: ConvertOptions, shared: bool,
               tmp: Path, caches: tuple[CompileCache, PartCache], steps: Steps,
               key_base: dict) -> tuple[PartPlan, list[_Part], dict]:
    """Every part written into ``tmp`` and its PD need predicted from its binary. Auto parts: a part
    predicted over the budget makes a new plan with more parts (convert/sizing.py) and starts over."""
    auto, replans = options.parts == "auto", []
    spec = src.spec
    while True:
        units = [weight_need(spec, b - a, 0, 1, (i == 0) + (i == plan.parts - 1)) for i, (a, b) in
                 enumerate(plan.bounds)]
        steps.total = steps.units + float(sum(units)) * (1.1 if options.precision == "fp16" else 1.6)
        models_of = _models(src, plan, options, ar, steps, tmp)
        try:
            done = _write_parts(src, plan, ar, options, shared, tmp, caches, models_of, steps, units,
                                {**key_base, "bounds": plan.bounds}, sizing.budget if auto else None)
            break
        except _OverBudget as over:
            for f in tmp.glob("*.bin"):
                f.unlink()
            old, was = plan, sizing
            plan, sizing = replan(spec, plan, over.part, over.need, shared, sizing)
            replans.append({"parts": [list(b) for b in old.bounds], "over_part": over.part, "need_bytes": over.need})
            then = (f"{plan.parts} parts instead" if plan.bounds != old.bounds else
                    f"the budget raised to {format_bytes(sizing.budget)}, what one layer there needs; the same parts")
            steps.note(f"part {over.part}/{old.parts} is predicted to need {format_bytes(over.need)} of PD, over the "
                       f"part budget {format_bytes(was.budget)}: {then} (the weights formula x{sizing.scale:.2f})")
    needs = [p.need for p in done]
    for i, n in enumerate(needs, 1):
        if n is not None and n > PD_LIMIT:
            steps.note(f"warning: part {i}/{plan.parts} is predicted to need {format_bytes(n)} of PD, past one PD "
                       f"({format_bytes(PD_LIMIT)}): it cannot be loaded there; give more --parts or --parts auto")
    known = None if any(n is None for n in needs) else sum(n or 0 for n in needs)
    pd = {**sizing.to_record(), "auto": auto, "predicted_bytes": needs, "total_predicted_bytes": known,
          "pds_at_least": None if known is None else -(-known // sizing.limit), "replans": replans}
    if auto:
        steps.note(f"{plan.parts} part(s), predicted PD needs {', '.join(format_bytes(n) for n in needs)}"
                   + (f"; {format_bytes(known)} in all, more than one PD: qnnrt llm spreads them over "
                      f"{pd['pds_at_least']}+ PDs" if known is not None and known > sizing.limit else ""))
    return plan, done, pd


def _write_parts(src: Source, plan: PartPlan, ar: int, options: ConvertOptions, shared: bool, tmp: Path,
                 caches: tuple[CompileCache, PartCache], models_of, steps: Steps, units: list[int],
                 key_base: dict, budget: int | None) -> list[_Part]:
    """Each part's binary into ``tmp``; raises _OverBudget at the first whose predicted need passes
    ``budget`` (auto parts)."""
    from qnnrt.compiler.pd_need import predicted_need
    ccache, pcache = caches
    name = src.path.stem.replace(" ", "_") or "model"
    out: list[_Part] = []
    work = Path(tempfile.mkdtemp(prefix="work-", dir=tmp))
    try:
        for part in range(1, plan.parts + 1):
            fname = f"{name}_part_{part}_of_{plan.parts}.bin"
            key = pcache.key({**key_base, "part": part, "shared": shared})
            blob = pcache.get(key)
            cached = blob is not None
            if blob is None:
                status = f"writing and compiling part {part}/{plan.parts}"
                beat = Heartbeat("convert", status.__str__, interval=30.0) if steps.enabled \
                    else contextlib.nullcontext()
                with beat:
                    blob = _part_blob(src, plan, part, ar, options, shared, work, ccache, models_of)
                pcache.put(key, blob)
            need = predicted_need(blob, fname).total
            first, stop = plan.bounds[part - 1]
            steps.done(f"part {part}/{plan.parts} {'from the cache' if cached else 'compiled'}: layers {first}.."
                       f"{stop - 1}, {len(blob) / 2**20:.1f} MiB, predicted PD need {format_bytes(need)}",
                       units[part - 1] * (1.1 if options.precision == "fp16" else 1.6))
            if budget is not None and need is not None and need > budget:
                raise _OverBudget(part, need)
            (tmp / fname).write_bytes(blob)
            out.append(_Part(fname, need, cached))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


__all__ = ["ConvertOptions", "ConvertReport", "convert", "plan_parts"]
