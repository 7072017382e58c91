"""Fixed-point graph I/O (UFIXED_POINT_8 with scale/offset): raw integers or floats in, dequantized
floats or raw integers out."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import qnnrt
from qnnrt.core import Backend, Context, ContextBinary
from qnnrt.errors import InputError
from tests.helpers.program_fixtures import epcontext_node, save_model
from tests.helpers.qnn_fixtures import Q_IN, Q_OUT, WIDTH


def ref_q(xq: np.ndarray) -> np.ndarray:
    x = (xq.astype(np.float32) - Q_IN[1]) * Q_IN[0]
    return np.clip(np.rint(np.maximum(x, 0) / Q_OUT[0]) + Q_OUT[1], 0, 255).astype(np.uint8)


XQ = np.arange(0, 256, 4, dtype=np.uint8)[None]  # 64 values covering the range


def test_specs_carry_quantization(q8_binary):
    g = ContextBinary(q8_binary.path).graphs[0]
    (i,), (o,) = g.inputs, g.outputs
    assert i.data_type_name == "UFIXED_POINT_8" and i.dtype == np.uint8
    assert i.quantization.scale == pytest.approx(Q_IN[0]) and i.quantization.offset == -Q_IN[1]
    assert o.quantization.scale == pytest.approx(Q_OUT[0])


def test_raw_and_float_inputs_raw_and_float_outputs(q8_binary):
    with Backend() as be, Context(be, ContextBinary(q8_binary.path)) as ctx:
        g = ctx.graph(q8_binary.graphs[0])
        raw = g.execute([XQ], dequantize=False)["yq"]
        assert raw.dtype == np.uint8
        assert np.abs(raw.astype(int) - ref_q(XQ).astype(int)).max() <= 1
        # float in: quantized with the input's scale/offset -> same result
        xf = (XQ.astype(np.float32) - Q_IN[1]) * Q_IN[0]
        np.testing.assert_array_equal(g.execute([xf], dequantize=False)["yq"], raw)
        # float out (the default): dequantized with the output's scale/offset
        yf = g.execute([XQ])["yq"]
        assert yf.dtype == np.float32
        np.testing.assert_allclose(yf, (raw.astype(np.float32) - Q_OUT[1]) * Q_OUT[0])
        with pytest.raises(InputError, match="uint8"):
            g.execute([XQ.astype(np.int32)])


def test_method_keeps_onnx_declared_integer_types(q8_binary, tmp_path):
    """An EPContext model declaring uint8 I/O gets uint8 back (as ONNX Runtime would)."""
    (tmp_path / "contexts").mkdir()
    (tmp_path / "contexts" / "q.bin").write_bytes(q8_binary.path.read_bytes())
    save_model([epcontext_node(q8_binary.graphs[0], "contexts/q.bin", ["xq"], ["yq"])],
               [helper.make_tensor_value_info("xq", TensorProto.UINT8, [1, WIDTH])],
               [helper.make_tensor_value_info("yq", TensorProto.UINT8, [1, WIDTH])],
               tmp_path / "q.onnx")
    with qnnrt.load(tmp_path / "q.onnx") as prog:
        m = prog.method()
        assert m.inputs[0].dtype == np.uint8 and m.outputs[0].dtype == np.uint8
        y = prog.run(None, [XQ])["yq"]
    assert y.dtype == np.uint8
    assert np.abs(y.astype(int) - ref_q(XQ).astype(int)).max() <= 1
    # a raw .bin run gives floats (dequantized) and accepts floats
    with qnnrt.load(q8_binary.path) as prog:
        m = prog.method()
        assert m.outputs[0].dtype == np.float32
        xf = (XQ.astype(np.float32) - Q_IN[1]) * Q_IN[0]
        y = prog.run(None, [xf])["yq"]
    np.testing.assert_allclose(y, ref_q(XQ) * Q_OUT[0], atol=Q_OUT[0] + 1e-6)
