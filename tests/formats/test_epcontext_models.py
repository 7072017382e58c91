"""EPContext models written by ONNX Runtime itself (embed mode 0 and 1, one or two QNN partitions with
a CPU node between them) run through qnnrt exactly as ONNX Runtime runs them."""
import numpy as np
import onnx
import pytest

import qnnrt
from qnnrt.compiler.compile import qnn_session
from qnnrt.errors import FormatError
from tests.helpers.qnn_fixtures import WIDTH, add_relu_mul, add_relu_mul_ref, two_partitions

X = np.linspace(-2, 2, WIDTH, dtype=np.float32)[None]


def two_partitions_ref(x):
    b = np.linspace(-1, 1, WIDTH).astype(np.float32)
    return 1 / (1 + np.exp(-(np.sinh(np.maximum(x + b, 0)) * b)))


@pytest.fixture(scope="module", params=[(m, e) for m in ("one", "two") for e in (0, 1)],
                ids=lambda p: f"{p[0]}-embed{p[1]}")
def ort_epcontext(request, tmp_path_factory):
    kind, embed = request.param
    d = tmp_path_factory.mktemp(f"{kind}{embed}")
    onnx.save(add_relu_mul() if kind == "one" else two_partitions(), d / "m.onnx")
    qnn_session(d / "m.onnx", config={"ep.context_enable": "1",
                                      "ep.context_embed_mode": str(embed),
                                      "ep.context_file_path": str(d / "m_ctx.onnx")})
    ref = add_relu_mul_ref(X) if kind == "one" else two_partitions_ref(X)
    return d / "m_ctx.onnx", kind, embed, ref


def test_qnnrt_equals_onnxruntime(ort_epcontext):
    path, kind, embed, ref = ort_epcontext
    model = onnx.load(str(path))
    eps = [n for n in model.graph.node if n.op_type == "EPContext"]
    assert len(eps) == (1 if kind == "one" else 2)
    with qnnrt.load(path) as prog:
        (name, y), = prog.run(None, [X]).items()
        assert len(prog.binaries) == 1  # two graphs of one context, created once
        assert prog.pool.summary()["creates"] == 1
    y_ort = qnn_session(path).run(None, {"x": X})[0]
    np.testing.assert_array_equal(y, y_ort)
    np.testing.assert_allclose(y, ref, rtol=3e-2, atol=3e-2)


def test_missing_context_binary_is_a_clear_error(ort_epcontext, tmp_path):
    path, kind, embed, _ = ort_epcontext
    import shutil
    shutil.copyfile(path, tmp_path / "m_ctx.onnx")  # the .bin (if any) is not copied
    if embed:  # the binary is inside the model: it still loads on its own
        with qnnrt.load(tmp_path / "m_ctx.onnx") as prog:
            assert len(prog.binaries) == 1
        return
    with pytest.raises(FormatError, match="does not exist"):
        qnnrt.load(tmp_path / "m_ctx.onnx")
