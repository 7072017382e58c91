"""End to end on the x86 HTP simulator: .pte delegates run through qnnrt.core.

The ExecuTorch fixtures' context binaries are taken from the .pte memory map (no copy) and their
outputs compared with the float references; and a context binary qnnrt built is wrapped into .pte
files by tests/pte_writer.py (inline and segment data, CPU kernels around it).
"""

import numpy as np
import pytest

from qnnrt.executorch.reader import qnn_context_binary, qnn_graph_io_order, read_pte
from qnnrt.executorch.interpreter import PteMethodRunner
from tests.helpers.data import EXECUTORCH
from tests.helpers.pte_writer import PteBuilder, qnn_wrap
from tests.helpers.qnn_fixtures import WIDTH, add_relu_mul_ref

FIXTURES = EXECUTORCH
# ExecuTorch's own max abs error vs the float reference (fixtures README) + fp16 slack
TOLERANCE = {"add_relu_mul_fp16": 0.01, "add_relu_mul_q8": 0.06, "conv_linear_fp16": 0.01,
             "conv_linear_q8": 0.02, "many_4_fp16": 0.01, "two_methods_fp16": 0.03}


@pytest.fixture(scope="module")
def backend():
    core = pytest.importorskip("qnnrt.core")
    try:
        be = core.Backend(soc="SM8650")
    except Exception as e:  # noqa: BLE001 - no QNN libraries on this machine
        pytest.skip(f"QNN HTP backend unavailable: {e}")
    with be:
        yield be


def _qnn_runner(method, contexts):
    """delegate_runner as ExecuTorch's QNN backend binds args: graph = method name, inputs sorted by
    the number in their names, outputs in graph order."""
    def run(i, xs):
        d = method.delegates[i]
        g = contexts[d.key].graph(method.graph_name(i))
        in_pos, out_pos = qnn_graph_io_order([t.name for t in g.inputs], [t.name for t in g.outputs])
        out = g.execute({g.inputs[p].name: x for p, x in zip(in_pos, xs)})
        return [out[g.outputs[p].name] for p in out_pos]
    return run


@pytest.mark.skipif(not FIXTURES.exists(), reason="ExecuTorch fixtures not available")
@pytest.mark.parametrize("name", sorted(TOLERANCE))
def test_executorch_fixture_matches_reference(backend, name):
    from qnnrt.core import Context, ContextBinary
    folder = FIXTURES / name
    with read_pte(folder / "model.pte", require_qnn=True) as prog:
        contexts = {}
        try:
            for key, users in prog.unique_delegate_blobs().items():   # one context per shared blob
                binary = ContextBinary(buffer=qnn_context_binary(users[0]), name=f"{name}:{key}")
                contexts[key] = Context(backend, binary)
            for mname, meth in prog.methods.items():
                r = PteMethodRunner(meth, _qnn_runner(meth, contexts))
                xs = [np.load(folder / f"{mname}_input_{i}.npy") for i in range(len(meth.inputs))]
                outs = r.run(xs)
                for i, o in enumerate(outs):
                    ref = np.load(folder / f"{mname}_ref_{i}.npy")
                    assert o.shape == ref.shape
                    err = float(np.abs(o - ref).max())
                    assert err <= TOLERANCE[name], (mname, i, err)
        finally:
            for c in contexts.values():
                c.close()
        if name == "two_methods_fp16":
            assert len(contexts) == 1


@pytest.mark.parametrize("placement", ["segment", "inline"])
def test_qnnrt_binary_wrapped_in_pte(backend, small_binary, tmp_path, placement):
    """x -> mm(W) (CPU) -> QNN relu(.+b)*w -> add(x) (CPU), the context binary inside the .pte."""
    from qnnrt.core import Context, ContextBinary
    data = small_binary.path.read_bytes()
    W = np.random.default_rng(3).standard_normal((WIDTH, WIDTH)).astype(np.float32) / 8
    b = PteBuilder()
    blob = qnn_wrap(data)
    m = b.method("forward")
    x = m.tensor(np.float32, (1, WIDTH))
    w = m.constant(W)
    t1, t2, t3 = (m.tensor(np.float32, (1, WIDTH)) for _ in range(3))
    m.kernel("aten::mm.out", [x, w, t1, t1])
    d = m.delegate("QnnBackend", **{placement: (b.add_segment(blob) if placement == "segment"
                                                else b.add_inline_delegate_data(blob))})
    m.delegate_call(d, [t1, t2])
    m.kernel("aten::add.out", [t2, x, m.int(1), t3, t3])
    m.inputs, m.outputs = [x], [t3]
    b.save(tmp_path / "m.pte")
    with read_pte(tmp_path / "m.pte", require_qnn=True) as prog:
        meth = prog.methods["forward"]
        view = qnn_context_binary(meth.delegates[0])
        assert bytes(view[:256]) == data[:256] and len(view) == len(data)
        with Context(backend, ContextBinary(buffer=view, name="wrapped")) as ctx:
            g = ctx.graph(small_binary.graphs[0])

            def runner(i, xs):
                return list(g.execute(xs).values())

            X = np.random.default_rng(4).standard_normal((1, WIDTH)).astype(np.float32)
            y = PteMethodRunner(meth, runner).run([X])[0]
    ref = add_relu_mul_ref(X @ W) + X
    np.testing.assert_allclose(y, ref, rtol=2e-2, atol=2e-2)


@pytest.mark.skipif(not FIXTURES.exists(), reason="ExecuTorch fixtures not available")
def test_inspect_lists_graphs_of_each_context(backend):
    from qnnrt.executorch.describe import describe_pte, qnn_graph_lister
    lister = qnn_graph_lister()
    assert lister is not None
    with read_pte(FIXTURES / "two_methods_fp16" / "model.pte") as prog:
        info = describe_pte(prog, lister)
    (ctx,) = info["contexts"]
    assert sorted(g["name"] for g in ctx["graphs"]) == ["decode", "prefill"]
    assert ctx["context_binary_size"] == ctx["size"] - 256
