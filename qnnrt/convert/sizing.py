"""How `qnnrt convert` cuts a model into parts. ``--parts auto``: each part's context must fit the
part budget (``--part-budget``, default PART_BUDGET, at most one PD of the target), by qnnrt's own PD
prediction of the compiled binary (compiler/pd_need.py). The first split comes from the weights (fp16
weights once per graph holding its own copy, plus the float KV I/O); each compiled part's predicted
need is then checked, and a part over the budget makes a new plan with more parts, the weight formula
scaled by what the compiled part measured (a part also reserves its runlist, VTCM, I/O and 2 MiB weight
granules, which dominate a tiny model's need). A quantized part's ONNX model holds both graphs'
weights itself, so its plans also keep it under protobuf's 2 GiB (past it the compile cannot serialize
it); a float part's weights are in an external data file (compiler/external.py), without that limit."""
from __future__ import annotations

from dataclasses import dataclass, replace

from qnnrt.convert.graphs import PartPlan, split_layers
from qnnrt.convert.spec import ConvertError, ModelSpec
from qnnrt.soc import SIMULATOR_PD_CAPACITY
from qnnrt.units import format_bytes

PART_BUDGET = 1 << 30     # auto parts: each part's predicted PD need under this unless --part-budget says
PD_LIMIT = SIMULATOR_PD_CAPACITY    # one PD of the target: a part's context can never be larger
PD_LIMIT_SOURCE = "one PD of the x86 HTP simulator (QNN 2.51, measured; the only PD size known before a run)"
ONNX_LIMIT = (1 << 31) - 1          # protobuf's limit on one serialized message (a part's ONNX model)


def _layer_params(spec: ModelSpec) -> int:
    H, D = spec.hidden, spec.head_dim
    return H * D * (spec.heads * 2 + spec.kv_heads * 2) + 3 * H * spec.ffn


def weight_need(spec: ModelSpec, layers: int, context: int, copies: int, ends: int) -> int:
    """Predicted PD bytes of a part of ``layers`` layers by its weights alone: fp16 weights once per graph
    that holds its own copy, plus float32 KV I/O of both graphs; ``ends`` adds the embedding / head."""
    weights = 2 * (layers * _layer_params(spec) + ends * spec.vocab * spec.hidden)
    kv = layers * 2 * spec.kv_heads * spec.head_dim * context * 4 * 2
    return copies * weights + kv


def onnx_bytes(spec: ModelSpec, layers: int, ends: int, shared: bool) -> int:
    """float32 weight bytes of the ONNX model one compile serializes: both graphs (one per session
    when weight-shared)."""
    return (1 if shared else 2) * 4 * (layers * _layer_params(spec) + ends * spec.vocab * spec.hidden)


def _ends(i: int, n: int) -> int:
    return (i == 0) + (i == n - 1)


def _onnx_check(spec: ModelSpec, bounds: tuple[tuple[int, int], ...], shared: bool, inline: bool) -> int | None:
    """The first part (0-based) whose ONNX would pass protobuf's limit, or None (always None when the
    weights are not ``inline``, i.e. in an external data file)."""
    if not inline:
        return None
    n = len(bounds)
    return next((i for i, (a, b) in enumerate(bounds) if onnx_bytes(spec, b - a, _ends(i, n), shared) > ONNX_LIMIT),
                None)


def _onnx_error(spec: ModelSpec, shared: bool) -> ConvertError:
    per_end = onnx_bytes(spec, 0, 1, shared)
    fit = (ONNX_LIMIT // ((1 if shared else 2) * 4) - _layer_params(spec)) // spec.hidden
    return ConvertError(
        f"this model cannot be cut into parts qnnrt can compile: the part holding the embedding (or the lm head: "
        f"vocab {spec.vocab} x hidden {spec.hidden}, {format_bytes(per_end)} of float32 weights in its "
        f"prompt and token graphs) and one layer make an ONNX model past protobuf's 2 GiB limit on one "
        f"model, which the quantized compile path serializes. At hidden {spec.hidden} a vocab of at most {fit} "
        f"fits; convert this model with --precision fp16 (its weights go to an external file)")


@dataclass(frozen=True)
class Sizing:
    """What auto parts are sized against: ``budget`` bytes per part (at most ``limit``, one PD), and
    ``scale``: compiled need / weight formula measured so far (1.0 before any part compiled);
    ``inline``: the weights are inside each part's ONNX model (quantized), so protobuf's limit applies;
    ``strict``: the budget was given (--part-budget); the default one is raised to what a part of one
    layer needs when that is more (``at_least_one_layer``), up to one PD."""
    budget: int
    limit: int = PD_LIMIT
    scale: float = 1.0
    inline: bool = False
    strict: bool = False

    def to_record(self) -> dict:
        return {"part_budget_bytes": self.budget, "pd_limit_bytes": self.limit, "pd_limit": PD_LIMIT_SOURCE}


def at_least_one_layer(spec: ModelSpec, context: int, shared: bool, sizing: Sizing) -> Sizing:
    """The default budget raised to the largest part of a one-layer-per-part plan (the embedding's or
    the head's, on a large vocabulary) when that is over it, up to one PD; a given budget unchanged."""
    n = spec.layers
    floor = max(sizing.scale * weight_need(spec, b - a, context, 1 if shared else 2, _ends(i, n))
                for i, (a, b) in enumerate(split_layers(n, n)))
    if sizing.strict or floor <= sizing.budget or floor > sizing.limit:
        return sizing
    return replace(sizing, budget=int(floor))


def plan_parts(spec: ModelSpec, parts: str | int, context: int, shared: bool, sizing: Sizing,
               at_least: int = 1) -> PartPlan:
    """The layers of each part: ``parts`` (a count), or (auto) the fewest parts, at least ``at_least``,
    whose scaled weight formula each stays under ``sizing.budget``. Raises ConvertError when no
    split fits (the message says which limit and what to give)."""
    copies = 1 if shared else 2
    if parts != "auto":
        n = int(parts)
        if n > spec.layers:
            raise ConvertError(f"--parts {n}: the model has {spec.layers} layers; give at most {spec.layers}")
        bounds = split_layers(spec.layers, n)
        bad = _onnx_check(spec, bounds, shared, sizing.inline)
        if bad is not None:
            if _onnx_check(spec, split_layers(spec.layers, spec.layers), shared, sizing.inline) is not None:
                raise _onnx_error(spec, shared)
            size = onnx_bytes(spec, bounds[bad][1] - bounds[bad][0], _ends(bad, n), shared)
            raise ConvertError(f"--parts {n}: part {bad + 1}'s ONNX model would pass protobuf's 2 GiB "
                               f"({format_bytes(size)} of float32 weights); give more --parts or --parts auto")
        return PartPlan(context, bounds)
    for n in range(max(1, at_least), spec.layers + 1):
        bounds = split_layers(spec.layers, n)
        needs = [sizing.scale * weight_need(spec, b - a, context, copies, _ends(i, n))
                 for i, (a, b) in enumerate(bounds)]
        if max(needs) <= sizing.budget and _onnx_check(spec, bounds, shared, sizing.inline) is None:
            return PartPlan(context, bounds)
    if _onnx_check(spec, split_layers(spec.layers, spec.layers), shared, sizing.inline) is not None:
        raise _onnx_error(spec, shared)
    one = int(sizing.scale * weight_need(spec, 1, context, copies, 1))
    how = "by its weights" if sizing.scale == 1.0 else "by its weights, scaled to the parts compiled so far"
    raise ConvertError(f"a part of one layer would need about {format_bytes(one)} of PD at context {context} ({how}), "
                       f"over the part budget {format_bytes(sizing.budget)}: a part holds at least one layer. "
                       f"Give a larger --part-budget (at most one PD, {format_bytes(sizing.limit)}) or a "
                       f"smaller --context")


def replan(spec: ModelSpec, plan: PartPlan, part: int, need: int, shared: bool,
           sizing: Sizing) -> tuple[PartPlan, Sizing]:
    """After compiled part ``part`` (1-based) of ``plan`` was predicted at ``need`` bytes, over the budget:
    a plan with more parts, the formula scaled by that part's need over its formula's estimate. When
    that scale lifts the default budget over ``need`` (``at_least_one_layer``), the plan is kept and only
    the budget rises (its parts come from the part cache)."""
    a, b = plan.bounds[part - 1]
    estimate = weight_need(spec, b - a, plan.context, 1 if shared else 2, _ends(part - 1, plan.parts))
    scaled = at_least_one_layer(spec, plan.context, shared,
                                replace(sizing, scale=max(sizing.scale, need / max(estimate, 1))))
    if need <= scaled.budget:
        return plan_parts(spec, "auto", plan.context, shared, scaled, at_least=plan.parts), scaled
    if plan.parts >= spec.layers:
        raise ConvertError(f"part {part} of {plan.parts} (layers {a}..{b - 1}) is predicted to need "
                           f"{format_bytes(need)} of PD, over the part budget {format_bytes(scaled.budget)}, and a "
                           f"part holds at least one layer. Give a larger --part-budget (at most one PD, "
                           f"{format_bytes(sizing.limit)}) or a smaller --context")
    return plan_parts(spec, "auto", plan.context, shared, scaled, at_least=plan.parts + 1), scaled
