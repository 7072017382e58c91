"""`qnnrt convert --lora-rank R --lora-targets q_proj,v_proj,...`: part graphs whose targeted
projections take a LoRA term from graph inputs (qnnrt/formats/lora.py names them), so one compiled
bundle runs any adapter of that rank and those targets, or none (zeros), on any HTP, the x86
simulator included. Genie's other LoRA form, binary sections applied to a context, needs the device.

Per targeted projection: y = x W (+ b) + lora_scale * (x A) B, all three inputs bound by the runtime
(llm/lora.py); the q projection's 1/sqrt(D) (folded into W) scales the term too."""
from __future__ import annotations

from typing import TYPE_CHECKING

from qnnrt.convert.spec import ConvertError, ModelSpec
from qnnrt.formats.lora import SCALE_INPUT, TARGETS, LoraSlots, a_name, b_name

if TYPE_CHECKING:
    from qnnrt.convert.graphs import _Graph

_BY_KEY = {key: target for target, (_, key) in TARGETS.items()}
MAX_RANK = 256


def check_lora_options(rank: int | None, targets: tuple[str, ...], precision: str) -> None:
    """ConvertError for a bad --lora-rank / --lora-targets pair (each names the option and the fix)."""
    if rank is None:
        if targets:
            raise ConvertError("--lora-targets needs --lora-rank R (the adapters' rank)")
        return
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= MAX_RANK:
        raise ConvertError(f"--lora-rank {rank!r}: give a rank from 1 to {MAX_RANK}")
    if not targets:
        raise ConvertError(f"--lora-rank needs --lora-targets, e.g. q_proj,v_proj (any of {','.join(TARGETS)})")
    bad = [t for t in targets if t not in TARGETS]
    if bad:
        raise ConvertError(f"--lora-targets {','.join(bad)}: not a projection this converter knows; give any of "
                           f"{','.join(TARGETS)}")
    if len(set(targets)) != len(targets):
        raise ConvertError(f"--lora-targets {','.join(targets)}: a target is named twice")
    if precision != "fp16":
        raise ConvertError(f"--lora-rank with --precision {precision}: LoRA inputs are built for fp16 "
                           f"bundles only (quantized adapter inputs would need their own encodings)")


def parse_targets(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def slots_for(spec: ModelSpec, rank: int, targets: tuple[str, ...]) -> LoraSlots:
    """The bundle's LoRA inputs for ``spec`` (targets in TARGETS' order, each with its (in, out))."""
    shapes = spec.shapes()
    ordered = tuple(t for t in TARGETS if t in targets)
    dims = {t: (int(shapes[f"l0.{TARGETS[t][1]}"][0]), int(shapes[f"l0.{TARGETS[t][1]}"][1])) for t in ordered}
    return LoraSlots(rank, ordered, spec.layers, dims)


class LoraInputs:
    """The graph writer's LoRA hook (graphs.LoraHook): adds the scale input once per graph and the
    A / B inputs of each targeted projection, and the term itself."""

    def __init__(self, slots: LoraSlots) -> None:
        self.slots = slots
        self._graph: object = None
        self._scale = SCALE_INPUT

    def __call__(self, g: "_Graph", x: str, y: str, layer: int, key: str, scale: float) -> str:
        target = _BY_KEY.get(key)
        if target is None or target not in self.slots.targets:
            return y
        if g is not self._graph:
            self._graph = g
            self._scale = g.input(SCALE_INPUT, [1])
        fin, fout = self.slots.dims[target]
        a = g.input(a_name(layer, target), [fin, self.slots.rank])
        b = g.input(b_name(layer, target), [self.slots.rank, fout])
        term = g.op("Mul", g.op("MatMul", g.op("MatMul", x, a), b), self._scale)
        if scale != 1.0:
            import numpy as np
            term = g.op("Mul", term, g.const(np.array([scale], np.float32)))
        return g.op("Add", y, term)
