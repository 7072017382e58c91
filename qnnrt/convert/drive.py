"""Running a bundle's part graphs the way Genie does, on any caller (ONNX Runtime's CPU EP for
calibration and checks): the prompt in chunks of the prompt AR through the prompt graphs, then one
token per call through the AR-1 graphs, the KV cache kept here (valid past left-aligned, the new
entries written after it), the mask and RoPE tables made as Genie makes them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from qnnrt.convert.graphs import MASKED, PartPlan
from qnnrt.convert.reference import rope_tables
from qnnrt.convert.spec import ModelSpec

Call = Callable[[int, int, dict[str, np.ndarray]], dict[str, np.ndarray]]   # (part, ar, feeds) -> outputs


@dataclass(frozen=True)
class Step:
    """One call of every part: ``count`` real tokens (of ``ar``) at positions n_past.."""
    ar: int
    n_past: int
    count: int


def step_inputs(spec: ModelSpec, context: int, step: Step) -> dict[str, np.ndarray]:
    """attention_mask and position_ids_cos / _sin of ``step``: the past in its first n_past columns,
    the new tokens in the last ``ar``, causal, padding rows attending to nothing."""
    N, CL = step.ar, context
    mask = np.full((N, CL), MASKED, np.float32)
    mask[:step.count, :step.n_past] = 0
    for t in range(step.count):
        mask[t, CL - N:CL - N + t + 1] = 0
    cos, sin = rope_tables(spec, step.n_past + np.arange(N))
    return {"attention_mask": mask.reshape(1, 1, N, CL),
            "position_ids_cos": cos.astype(np.float32).reshape(1, 1, N, -1),
            "position_ids_sin": sin.astype(np.float32).reshape(1, 1, N, -1)}


def run_parts(spec: ModelSpec, plan: PartPlan, call: Call, prompt: list[int], max_new: int, prompt_ar: int,
              stop: frozenset[int] = frozenset(), unwritten: float = 0.0) -> list[int]:
    """Greedy tokens of the part graphs after ``prompt`` (Genie's order of calls); cache slots not
    yet written hold ``unwritten`` (NaN stands in for the garbage Genie leaves there)."""
    CL, D, KVH = plan.context, spec.head_dim, spec.kv_heads
    keys = np.full((spec.layers, KVH, 1, D, CL), unwritten, np.float32)
    values = np.full((spec.layers, KVH, 1, CL, D), unwritten, np.float32)
    n_past, out, pending = 0, list[int](), list(prompt)
    while pending and len(out) < max_new and n_past + len(pending) <= CL:
        ar = prompt_ar if len(pending) > 1 else 1
        step = Step(ar, n_past, min(ar, len(pending)))
        ids = np.zeros((1, ar), np.int32)
        ids[0, :step.count] = pending[:step.count]
        feeds: dict[str, np.ndarray] = {"input_ids": ids, **step_inputs(spec, CL, step)}
        for part in range(1, plan.parts + 1):
            first, last = plan.bounds[part - 1]
            for i in range(first, last):
                feeds[f"past_key_{i}_in"] = keys[i, ..., :CL - ar]
                feeds[f"past_value_{i}_in"] = values[i, :, :, :CL - ar]
            res = call(part, ar, feeds)
            for i in range(first, last):
                keys[i, ..., n_past:n_past + step.count] = res[f"past_key_{i}_out"][..., :step.count]
                values[i, :, :, n_past:n_past + step.count] = res[f"past_value_{i}_out"][:, :, :step.count]
            feeds.update(res)
        n_past += step.count
        pending = pending[step.count:]
        if not pending:
            out.append(int(np.argmax(feeds["logits"][0, step.count - 1])))
            if out[-1] in stop:
                break
            pending = [out[-1]]
    return out


def cpu_caller(models: Callable[[int, int], bytes], record: dict | None = None) -> Call:
    """``call`` on ONNX Runtime's CPU EP over ``models(part, ar)`` (serialized ONNX); ``record``
    collects each graph's feeds and every I/O tensor's (min, max), for calibration."""
    import onnxruntime as ort
    sessions: dict[tuple[int, int], ort.InferenceSession] = {}

    def call(part: int, ar: int, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        s = sessions.get((part, ar))
        if s is None:
            so = ort.SessionOptions()
            so.log_severity_level = 3
            s = sessions[(part, ar)] = ort.InferenceSession(models(part, ar), so,
                                                            providers=["CPUExecutionProvider"])
        names = [o.name for o in s.get_outputs()]
        fed = {i.name: feeds[i.name] for i in s.get_inputs()}
        res = dict(zip(names, s.run(names, fed)))
        if record is not None:
            record.setdefault("feeds", {}).setdefault((part, ar), []).append(fed)
            ranges = record.setdefault("ranges", {})
            for n, v in {**fed, **res}.items():
                lo, hi = ranges.get(n, (np.inf, -np.inf))
                ranges[n] = (min(lo, float(v.min())), max(hi, float(v.max())))
        return res
    return call
