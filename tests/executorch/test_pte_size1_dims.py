"""A CPU reduction yielding a 0-d tensor feeds a QNN graph input of shape [1] (what ExecuTorch
accepts: same element count and dtype, shapes differing only by size-1 dims); other mismatches are
rejected. Real binary compiled by ORT's QNN EP, run on the simulator."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnnrt.executorch.program import size1_reshape
from tests.helpers.pte_writer import PteBuilder, qnn_wrap
from tests.helpers.qnn_fixtures import compile_models


def _scale_by_two(shape: list[int]) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["y"])], "s1",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                          [numpy_helper.from_array(np.array([2.0], np.float32), "two")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.fixture(scope="module")
def one_elem_binary(tmp_path_factory):
    return compile_models([_scale_by_two([1])], ["scale1"], tmp_path_factory.mktemp("s1"))


def _pte(path, binary: bytes, reduce_to: tuple) -> None:
    """x [1, 8] -> sum over dim 1 (CPU, keepdim False) -> shape `reduce_to` -> QNN y = 2 * s."""
    b = PteBuilder()
    m = b.method("forward")
    x = m.tensor(np.float32, (1, 8))
    s = m.tensor(np.float32, reduce_to)
    y = m.tensor(np.float32, (1,))
    dims = [0, 1] if reduce_to == () else [1]
    m.kernel("aten::sum.IntList_out", [x, m.int_list(dims), m.bool(False), m.null(), s, s])
    d = m.delegate("QnnBackend", segment=b.add_segment(qnn_wrap(binary)))
    m.delegate_call(d, [s, y])
    m.inputs, m.outputs = [x], [y]
    b.save(path)


def test_zero_d_reduction_feeds_a_one_element_graph_input(one_elem_binary, tmp_path):
    import qnnrt
    _pte(tmp_path / "m.pte", one_elem_binary.path.read_bytes(), ())
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    with qnnrt.load(tmp_path / "m.pte") as prog:
        y = prog.run("forward", [x])
    (out,) = y.values()
    assert out.shape == (1,)
    np.testing.assert_allclose(out, [2 * x.sum()], rtol=1e-2, atol=1e-2)


def test_size1_reshape_accepts_only_size1_differences():
    assert size1_reshape(np.zeros(()), (1,)).shape == (1,)
    assert size1_reshape(np.zeros((1, 4)), (4, 1)).shape == (4, 1)
    assert size1_reshape(np.zeros((1, 3, 1)), (3,)).shape == (3,)
    for shape, want in (((2,), (1,)), ((2, 3), (3, 2)), ((6,), (2, 3)), ((4,), (None,))):
        x = np.zeros(shape)
        assert size1_reshape(x, want) is x  # left for the graph's own check to reject


def test_other_shape_mismatch_is_rejected(one_elem_binary, tmp_path):
    """sum over dim 1 of x [2, 8] gives [2]: two elements cannot feed a [1] input."""
    import qnnrt
    from qnnrt.errors import QnnrtError
    b = PteBuilder()
    m = b.method("forward")
    x = m.tensor(np.float32, (2, 8))
    s = m.tensor(np.float32, (2,))
    y = m.tensor(np.float32, (1,))
    m.kernel("aten::sum.IntList_out", [x, m.int_list([1]), m.bool(False), m.null(), s, s])
    d = m.delegate("QnnBackend", segment=b.add_segment(qnn_wrap(one_elem_binary.path.read_bytes())))
    m.delegate_call(d, [s, y])
    m.inputs, m.outputs = [x], [y]
    b.save(tmp_path / "bad.pte")
    with qnnrt.load(tmp_path / "bad.pte") as prog:
        with pytest.raises((QnnrtError, ValueError), match="shape"):
            prog.run("forward", [np.ones((2, 8), np.float32)])
