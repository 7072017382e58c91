"""A PEFT LoRA adapter folder as people have them (``adapter_config.json`` + ``adapter_model.safetensors``,
what ``PeftModel.save_pretrained`` writes), read with numpy and checked against a bundle's LoRA inputs
(formats/lora.py). PEFT's names: ``base_model.model.model.layers.<i>.self_attn.q_proj.lora_A.weight``
[r, in] and ``...lora_B.weight`` [out, r]; the scale is lora_alpha / r (lora_alpha / sqrt(r) with
use_rslora). An adapter of a smaller rank than the bundle's is zero-padded (exact); targets the bundle
has and the adapter lacks are zeros. Every mismatch is a FormatError naming the file and tensor."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qnnrt.errors import FormatError
from qnnrt.formats.lora import SCALE_INPUT, TARGETS, LoraSlots, a_name, b_name
from qnnrt.formats.safetensors_file import SafetensorsFile

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
PREFIX = "base_model.model.model.layers."


@dataclass(frozen=True)
class PeftConfig:
    """What of adapter_config.json decides the weights' use."""
    rank: int
    alpha: float
    targets: tuple[str, ...]
    rslora: bool

    @property
    def scale(self) -> float:
        return self.alpha / (math.sqrt(self.rank) if self.rslora else self.rank)


def read_config(folder: Path) -> PeftConfig:
    path = folder / CONFIG_NAME
    if not folder.is_dir():
        raise FormatError(f"{folder}: not a folder; give a PEFT adapter folder ({CONFIG_NAME} + {WEIGHTS_NAME})")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FormatError(f"{path}: missing; a PEFT adapter folder holds {CONFIG_NAME} and {WEIGHTS_NAME}") from None
    except (OSError, ValueError) as e:
        raise FormatError(f"{path}: cannot be read as JSON ({e})") from None
    if not isinstance(cfg, dict) or str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        raise FormatError(f"{path}: peft_type {cfg.get('peft_type') if isinstance(cfg, dict) else cfg!r}; "
                          f"only LORA adapters can be bound")
    for key, ok in (("use_dora", not cfg.get("use_dora")), ("fan_in_fan_out", not cfg.get("fan_in_fan_out")),
                    ("rank_pattern", not cfg.get("rank_pattern")), ("alpha_pattern", not cfg.get("alpha_pattern")),
                    ("modules_to_save", not cfg.get("modules_to_save")),
                    ("bias", cfg.get("bias", "none") == "none")):
        if not ok:
            raise FormatError(f"{path}: {key} = {cfg[key]!r} is not supported (plain LoRA of one rank and alpha "
                              f"on q/k/v/o/gate/up/down projections only)")
    targets = cfg.get("target_modules")
    if isinstance(targets, str) or not isinstance(targets, list) or not targets:
        raise FormatError(f"{path}: target_modules {targets!r}: give the list of projections (e.g. "
                          f"[\"q_proj\", \"v_proj\"]); a regular expression is not supported")
    bad = [t for t in targets if t not in TARGETS]
    if bad:
        raise FormatError(f"{path}: target_modules {bad} are not projections a converted bundle takes "
                          f"adapters on ({', '.join(TARGETS)})")
    try:
        rank = int(cfg["r"])
        alpha = float(cfg["lora_alpha"] if cfg.get("lora_alpha") is not None else rank)
    except (KeyError, TypeError, ValueError):
        raise FormatError(f"{path}: 'r' (the rank) is missing or not a number") from None
    if rank < 1:
        raise FormatError(f"{path}: r = {rank}; give a positive rank")
    return PeftConfig(rank, alpha, tuple(str(t) for t in targets), bool(cfg.get("use_rslora", False)))


def read_tensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as float32 (bf16 widened bit-exactly)."""
    if not path.is_file():
        raise FormatError(f"{path}: missing; a PEFT adapter folder holds {CONFIG_NAME} and {WEIGHTS_NAME}")
    f = SafetensorsFile(path)
    return {name: f.float32(name) for name in f.entries}


@dataclass(frozen=True)
class PeftAdapter:
    """An adapter checked against a bundle: float32 arrays for every LoRA input of ``slots``
    (A [in, R], B [R, out], zero-padded; zeros for targets it lacks) and its scale."""
    folder: Path
    config: PeftConfig
    arrays: dict[str, np.ndarray]

    @staticmethod
    def load(folder: str | Path, slots: LoraSlots) -> "PeftAdapter":
        folder = Path(folder)
        cfg = read_config(folder)
        if cfg.rank > slots.rank:
            raise FormatError(f"{folder / CONFIG_NAME}: r = {cfg.rank} but the bundle's LoRA inputs have rank "
                              f"{slots.rank}; convert the model with --lora-rank {cfg.rank} or more")
        missing = [t for t in cfg.targets if t not in slots.targets]
        if missing:
            raise FormatError(f"{folder / CONFIG_NAME}: target_modules {missing} take no adapter in this bundle "
                              f"(its --lora-targets: {','.join(slots.targets)}); convert with them included")
        path = folder / WEIGHTS_NAME
        tensors = read_tensors(path)
        arrays = {n: np.zeros(s, np.float32) for n, s in slots.inputs().items()}
        for i in range(slots.layers):
            for t in cfg.targets:
                fin, fout = slots.dims[t]
                a = _take(tensors, path, f"{PREFIX}{i}.{TARGETS[t][0]}.lora_A.weight", (cfg.rank, fin))
                b = _take(tensors, path, f"{PREFIX}{i}.{TARGETS[t][0]}.lora_B.weight", (fout, cfg.rank))
                arrays[a_name(i, t)][:, :cfg.rank] = a.T
                arrays[b_name(i, t)][:cfg.rank, :] = b.T
        if tensors:
            extra = sorted(tensors)[:3]
            raise FormatError(f"{path}: tensors {extra} ({len(tensors)} in all) are not LoRA weights of this "
                              f"bundle's {slots.layers} layers and targets {','.join(cfg.targets)}; the adapter "
                              f"was made for another model")
        arrays[SCALE_INPUT][0] = cfg.scale
        return PeftAdapter(folder, cfg, arrays)


def _take(tensors: dict[str, np.ndarray], path: Path, name: str, shape: tuple[int, int]) -> np.ndarray:
    t = tensors.pop(name, None)
    if t is None:
        raise FormatError(f"{path}: tensor {name!r} is missing (adapter_config.json names its target); the "
                          f"adapter is incomplete or was made for a model with fewer layers")
    if t.shape != shape:
        raise FormatError(f"{path}: tensor {name!r} has shape {list(t.shape)}; this bundle takes {list(shape)} "
                          f"(rank, features of the base model): the adapter was made for another model")
    if not np.isfinite(t).all():
        raise FormatError(f"{path}: tensor {name!r} holds NaN or infinite values")
    return t
