"""w4a16's weight encoding (qnnrt/convert/weights4.py), without a compile: the block scales, the INT4
packing ONNX reads back, and which MatMul weights stay int8."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qnnrt.convert import weights4


def test_block_scales_beat_round_to_nearest_and_stay_in_int4() -> None:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((96, 40)).astype(np.float32)
    w[5, 7] = 12.0                                    # one outlier in a block
    q, s = weights4.block_quantize(w, 32)
    assert q.dtype == np.int8 and q.min() >= -8 and q.max() <= 7 and s.shape == (3, 40)
    mine = q * np.repeat(s, 32, axis=0)
    rtn_s = np.abs(w.reshape(3, 32, 40)).max(axis=1) / 7
    rtn = np.clip(np.round(w / np.repeat(rtn_s, 32, axis=0)), -8, 7) * np.repeat(rtn_s, 32, axis=0)
    assert ((mine - w) ** 2).sum() < 0.9 * ((rtn - w) ** 2).sum()


def test_int4_initializer_reads_back() -> None:
    q = np.array([[1, -2, 3], [-8, 7, 0], [5, -1, 4]], np.int8)
    back = numpy_helper.to_array(weights4.int4_tensor("w", q))
    assert back.shape == (3, 3) and np.array_equal(back.astype(np.int8), q)


def _model(act_shape: list[int], k: int) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((k, 8), np.float32) * 0.5, "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*act_shape, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*act_shape, 8])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def test_weights_blocks_cannot_take_stay_int8() -> None:
    """Blocked: [1, tokens, K] with K a multiple of 32. int8: K = 48, or an activation of [tokens, heads, K]
    (QNN's finalize of that block-quantized MatMul fails with MEM_ALLOC)."""
    assert weights4.unblocked_overrides(_model([1, 16], 64)) == {}
    for shape, k in (([1, 16], 48), ([16, 9], 64)):
        over = weights4.unblocked_overrides(_model(shape, k))
        assert list(over) == ["w"] and over["w"][0]["zero_point"] == 0
        assert np.isclose(over["w"][0]["scale"], 0.5 / 127)


def test_the_lm_head_stays_int8_per_channel() -> None:
    m = _model([1, 16], 64)
    m.graph.output[0].name = "logits"
    m.graph.node[0].output[0] = "logits"
    over = weights4.unblocked_overrides(m)["w"]
    assert len(over) == 8 and over[0]["axis"] == 1 and np.allclose([o["scale"] for o in over], 0.5 / 127)
