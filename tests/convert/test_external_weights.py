"""A part's weights written to one external data file as its graphs are made (qnnrt/compiler/external.py):
stored once for both graphs, the same model as with the weights inside it, and part of the compile
cache's key (different weights, same graphs: another key, never a stale binary)."""
from __future__ import annotations

import numpy as np
import onnx

from qnnrt.compiler.compile import CompileOptions, unit_key
from qnnrt.compiler.external import SMALLEST, ExternalWeights, external_files
from qnnrt.convert import drive, graphs
from qnnrt.convert.spec import ModelSpec

SPEC = ModelSpec("LlamaForCausalLM", vocab=64, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128,
                 eps=1e-5, rope_theta=10000.0, max_positions=64, tied=True)
PLAN = graphs.PartPlan(32, graphs.split_layers(2, 1))


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {k: (rng.standard_normal(s) / np.sqrt(s[0]) if len(s) == 2 else 1 + 0.1 * rng.standard_normal(s))
            .astype(np.float32) for k, s in SPEC.shapes().items()}


def _feeds(ar: int) -> dict[str, np.ndarray]:
    feeds = {"input_ids": np.arange(3, 3 + ar, dtype=np.int32).reshape(1, ar),
             **drive.step_inputs(SPEC, 32, drive.Step(ar, 0, ar))}
    for i in range(2):
        feeds[f"past_key_{i}_in"] = np.zeros((2, 1, 16, 32 - ar), np.float32)
        feeds[f"past_value_{i}_in"] = np.zeros((2, 1, 32 - ar, 16), np.float32)
    return feeds


def _logits(model: onnx.ModelProto | str, ar: int) -> np.ndarray:
    import onnxruntime as ort
    src = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(["logits"], _feeds(ar))[0]


def test_a_parts_graphs_share_one_copy_of_their_weights_and_compute_the_same(tmp_path) -> None:
    w = _weights()
    store = ExternalWeights(tmp_path / "weights.bin")
    prompt = graphs.part_model(SPEC, PLAN, w, 8, 1, store=store)
    token = graphs.part_model(SPEC, PLAN, w, 1, 1, store=store)
    inline = graphs.part_model(SPEC, PLAN, w, 8, 1)
    weight_bytes = sum(a.nbytes for a in w.values()) + w["embed"].nbytes      # + the tied head's transpose
    size = (tmp_path / "weights.bin").stat().st_size
    assert weight_bytes <= size < 1.3 * weight_bytes          # once, not once per graph
    assert external_files(prompt) == external_files(token) == {"weights.bin"}
    assert max(len(t.raw_data) for t in prompt.graph.initializer) < SMALLEST   # no weight left inside
    assert prompt.ByteSize() < inline.ByteSize() / 10
    for model, ar in ((prompt, 8), (token, 1)):
        onnx.save(model, tmp_path / f"ar{ar}.onnx")
        expect = _logits(graphs.part_model(SPEC, PLAN, w, ar, 1), ar)
        np.testing.assert_array_equal(_logits(str(tmp_path / f"ar{ar}.onnx"), ar), expect)


def test_the_compile_key_covers_the_external_weights(tmp_path) -> None:
    keys = []
    for scale in (1.0, 2.0):
        w = {k: v * np.float32(scale) for k, v in _weights().items()}
        d = tmp_path / f"s{scale}"
        store = ExternalWeights(d / "weights.bin")
        models = [graphs.part_model(SPEC, PLAN, w, ar, 1, store=store) for ar in (8, 1)]
        keys.append(unit_key(models, ["p", "t"], CompileOptions(), d))
    assert keys[0] != keys[1]                         # same graphs and offsets, other weights
