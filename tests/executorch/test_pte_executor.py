"""PteMethodRunner on .pte files from tests/pte_writer.py, with numpy callables as delegates."""
import gc
import weakref

import numpy as np
import pytest

from qnnrt.errors import FormatError, InputError, QnnrtError
from qnnrt.executorch.reader import read_pte
from qnnrt.executorch.kernels import KernelError
from qnnrt.executorch.describe import describe_pte
from qnnrt.executorch.interpreter import PteMethodRunner
from tests.helpers.data import EXECUTORCH
from tests.helpers.pte_writer import PteBuilder, qnn_wrap

f32 = np.float32
FIXTURES = EXECUTORCH
rng = np.random.default_rng(0)


def _save(b: PteBuilder, tmp_path, name="m.pte"):
    p = tmp_path / name
    b.save(p)
    return read_pte(p, require_qnn=True)


def test_kernels_and_delegates_in_one_chain(tmp_path):
    """x -> mm(W) -> delegate 0 (relu(a)+b) -> add(alpha) -> view -> permute -> cat -> sum -> out"""
    W = rng.standard_normal((4, 4)).astype(f32)
    c = rng.standard_normal((2, 4)).astype(f32)
    b = PteBuilder()
    seg = b.add_segment(qnn_wrap(b"ctx0" * 8))
    m = b.method("forward")
    x = m.tensor(f32, (2, 4))
    w = m.constant(W)
    cc = m.constant(c)
    t1, t2, t3, t4, t5, t6, t7 = (m.tensor(f32, s) for s in
                                  [(2, 4), (2, 4), (2, 4), (4, 2), (2, 4), (4, 4), (4,)])
    m.kernel("aten::mm.out", [x, w, t1, t1])
    d = m.delegate("QnnBackend", segment=seg)
    m.delegate_call(d, [t1, x, t2])
    m.kernel("aten::add.out", [t2, cc, m.double(0.5), t3, t3])
    m.kernel("aten::view_copy.out", [t3, m.int_list([4, -1]), t4, t4])
    m.kernel("aten::permute_copy.out", [t4, m.int_list([1, 0]), t5, t5])
    m.kernel("aten::cat.out", [m.tensor_list([t5, t3]), m.int(0), t6, t6])
    m.kernel("aten::sum.IntList_out", [t6, m.int_list([1]), m.bool(False), m.null(), t7, t7])
    m.inputs, m.outputs = [x], [t7, t2]
    prog = _save(b, tmp_path)
    calls = []

    def delegate(i, xs):
        calls.append((i, [a.shape for a in xs]))
        return [np.maximum(xs[0], 0) + xs[1]]

    r = PteMethodRunner(prog.methods["forward"], delegate)
    X = rng.standard_normal((2, 4)).astype(f32)
    trace = []
    y, z = r.run([X], trace=trace)
    a2 = np.maximum(X @ W, 0) + X
    a3 = a2 + 0.5 * c
    a5 = a3.reshape(4, 2).T
    np.testing.assert_allclose(z, a2, rtol=1e-5)
    np.testing.assert_allclose(y, np.concatenate([a5, a3], 0).sum(1), rtol=1e-5)
    assert calls == [(0, [(2, 4), (2, 4)])]
    assert [t["kind"] for t in trace] == ["kernel", "delegate"] + ["kernel"] * 5
    assert r.delegate_call_order() == [0]
    assert r.delegate_inputs(1) == ([t1, x], [t2])
    # the same runner runs again with fresh values
    y2, _ = r.run({"input_0": X})
    np.testing.assert_array_equal(y, y2)


def test_every_kernel_in_a_program(tmp_path):
    """Each required operator as a KernelCall in a .pte, checked against numpy."""
    X = rng.standard_normal((2, 3, 4)).astype(f32)
    b = PteBuilder(constants="inline")
    m = b.method("forward")
    x = m.tensor(f32, (2, 3, 4))
    checks = []

    def k(op, args, shape, dtype, ref):
        o = m.tensor(dtype, shape)
        m.kernel(op, [*args, o, o])
        checks.append((o, ref))
        return o

    M = rng.standard_normal((4, 5)).astype(f32)
    mat = m.constant(M)
    xv = k("aten::view_copy.out", [x, m.int_list([6, 4])], (6, 4), f32, X.reshape(6, 4))
    k("aten::mm.out", [xv, mat], (6, 5), f32, X.reshape(6, 4) @ M)
    B3 = rng.standard_normal((2, 4, 2)).astype(f32)
    k("aten::bmm.out", [k("aten::slice_copy.Tensor_out",
                          [x, m.int(1), m.int(0), m.null(), m.int(2)], (2, 2, 4), f32,
                          X[:, 0::2]), m.constant(B3)], (2, 2, 2), f32, X[:, 0::2] @ B3)
    bias = rng.standard_normal(5).astype(f32)
    k("aten::addmm.out", [m.constant(bias), xv, mat, m.int(1), m.double(2.0)], (6, 5), f32,
      bias + 2.0 * (X.reshape(6, 4) @ M))
    Wl = rng.standard_normal((3, 4)).astype(f32)
    k("aten::linear.out", [x, m.constant(Wl), m.null()], (2, 3, 3), f32, X @ Wl.T)
    other = rng.standard_normal((4,)).astype(f32)
    oc = m.constant(other)
    k("aten::add.out", [x, oc, m.int(2)], (2, 3, 4), f32, X + 2 * other)
    k("aten::sub.out", [x, oc, m.int(1)], (2, 3, 4), f32, X - other)
    k("aten::mul.out", [x, oc], (2, 3, 4), f32, X * other)
    k("aten::div.out", [x, oc], (2, 3, 4), f32, X / other)
    k("aten::sum.IntList_out", [x, m.int_list([0, 2]), m.bool(True), m.null()], (1, 3, 1), f32,
      X.sum((0, 2), keepdims=True))
    k("aten::mean.out", [x, m.int_list([-1]), m.bool(False), m.null()], (2, 3), f32, X.mean(-1))
    k("aten::permute_copy.out", [x, m.int_list([2, 0, 1])], (4, 2, 3), f32, X.transpose(2, 0, 1))
    k("aten::transpose_copy.int_out", [x, m.int(0), m.int(1)], (3, 2, 4), f32, X.swapaxes(0, 1))
    k("aten::cat.out", [m.tensor_list([x, x]), m.int(-1)], (2, 3, 8), f32,
      np.concatenate([X, X], -1))
    k("aten::select_copy.int_out", [x, m.int(1), m.int(-1)], (2, 4), f32, X[:, -1])
    ones = m.constant(np.ones((3, 1), f32))
    k("aten::expand_copy.out", [ones, m.int_list([2, 3, 4]), m.bool(False)], (2, 3, 4), f32,
      np.ones((2, 3, 4), f32))
    xu = k("aten::unsqueeze_copy.out", [x, m.int(1)], (2, 1, 3, 4), f32, X[:, None])
    k("aten::squeeze_copy.dims_out", [xu, m.int_list([1])], (2, 3, 4), f32, X)
    k("aten::clone.out", [x, m.null()], (2, 3, 4), f32, X)
    k("aten::_to_copy.out", [x, m.bool(False), m.null()], (2, 3, 4), np.float16,
      X.astype(np.float16))
    q = k("quantized_decomposed::quantize_per_tensor.out",
          [x, m.double(0.02), m.int(1), m.int(-128), m.int(127), m.int(1)], (2, 3, 4), np.int8,
          np.clip(np.round(X * f32(1 / 0.02)) + 1, -128, 127).astype(np.int8))
    k("quantized_decomposed::dequantize_per_tensor.out",
      [q, m.double(0.02), m.int(1), m.int(-128), m.int(127), m.int(1), m.null()], (2, 3, 4), f32,
      (np.clip(np.round(X * f32(1 / 0.02)) + 1, -128, 127) - 1).astype(f32) * f32(0.02))
    m.inputs = [x]
    m.outputs = [o for o, _ in checks]
    prog = _save(b, tmp_path)
    outs = PteMethodRunner(prog.methods["forward"]).run([X])
    for (o, ref), got in zip(checks, outs):
        assert got.dtype == np.asarray(ref).dtype
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(ref, np.float64), rtol=2e-5,
                                   atol=2e-5)
    assert len(set(prog.methods["forward"].used_operator_names())) == 23


def test_shared_delegate_two_methods(tmp_path):
    b = PteBuilder()
    seg = b.add_segment(qnn_wrap(b"one context, two graphs"))
    for name, n in (("prefill", 16), ("decode", 1)):
        m = b.method(name)
        x, y = m.tensor(f32, (1, n, 8)), m.tensor(f32, (1, n, 8))
        m.delegate_call(m.delegate("QnnBackend", segment=seg), [x, y])
        m.inputs, m.outputs = [x], [y]
    prog = _save(b, tmp_path)
    keys = {d.key for d in prog.delegates}
    assert keys == {("segment", 0)}
    graphs_run = []
    for name, meth in prog.methods.items():
        graph0 = meth.graph_name(0)

        def runner(i, xs, graph=graph0):
            graphs_run.append(graph)
            return [xs[0] * (2 if graph == "prefill" else 3)]
        r = PteMethodRunner(meth, runner)
        assert r.context_call_order() == [("segment", 0)]
        X = np.ones(meth.inputs[0].shape, f32)
        assert float(r.run([X])[0].sum()) == X.size * (2 if name == "prefill" else 3)
    assert graphs_run == ["prefill", "decode"]
    info = describe_pte(prog)
    assert len(info["contexts"]) == 1 and info["contexts"][0]["used_by"] == \
        ["prefill.delegates[0]", "decode.delegates[0]"]


def test_values_freed_after_last_use(tmp_path):
    b = PteBuilder()
    seg = b.add_segment(qnn_wrap(b"c"))
    m = b.method("forward")
    x = m.tensor(f32, (256,))
    t = [m.tensor(f32, (256,)) for _ in range(4)]
    d = m.delegate("QnnBackend", segment=seg)
    m.delegate_call(d, [x, t[0]])
    m.delegate_call(d, [t[0], t[1]])
    m.delegate_call(d, [t[1], t[2]])
    m.delegate_call(d, [t[2], t[3]])
    m.inputs, m.outputs = [x], [t[3]]
    prog = _save(b, tmp_path)
    refs = []
    alive_at_call = []

    def runner(i, xs):
        gc.collect()
        alive_at_call.append(sum(r() is not None for r in refs))
        y = xs[0] + 1
        refs.append(weakref.ref(y))
        return [y]

    r = PteMethodRunner(prog.methods["forward"], runner)
    out = r.run([np.zeros(256, f32)])[0]
    np.testing.assert_array_equal(out, 4)
    # at each call only the previous result (this call's input) is alive
    assert alive_at_call == [0, 1, 1, 1]
    r2 = PteMethodRunner(prog.methods["forward"], runner, free_values=False)
    refs.clear(), alive_at_call.clear()
    keep = r2.run([np.zeros(256, f32)])
    assert alive_at_call == [0, 1, 2, 3] and keep[0][0] == 4


def test_move_jump_free(tmp_path):
    b = PteBuilder()
    m = b.method("forward")
    x = m.tensor(f32, (3,))
    y = m.tensor(f32, (3,))
    z = m.tensor(f32, (3,))
    flag_false, flag_true = m.bool(False), m.bool(True)
    # 0: y = clone(x); 1: jump to 3 if false (it is false) ; 2: y = y*y (skipped)
    # 3: jump_false(true) does nothing; 4: z = move(y); 5: free(y); 6: z = z + z
    m.kernel("aten::clone.out", [x, m.null(), y, y])
    m.jump_false(flag_false, 3)
    m.kernel("aten::mul.out", [y, y, y, y])
    m.jump_false(flag_true, 0)
    m.move(y, z)
    m.free(y)
    w = m.tensor(f32, (3,))
    m.kernel("aten::add.out", [z, z, m.int(1), w, w])
    m.inputs, m.outputs = [x], [w]
    prog = _save(b, tmp_path)
    trace = []
    out = PteMethodRunner(prog.methods["forward"]).run([np.array([1, 2, 3], f32)], trace=trace)
    np.testing.assert_array_equal(out[0], [2, 4, 6])
    assert [t["index"] for t in trace] == [0, 1, 3, 4, 5, 6]


def test_unknown_operators_listed_at_load(tmp_path):
    b = PteBuilder()
    m = b.method("forward")
    x, y, z = m.tensor(f32, (2,)), m.tensor(f32, (2,)), m.tensor(f32, (2,))
    m.kernel("aten::cos.out", [x, y, y])
    m.kernel("aten::mm.out", [x, x, z, z])
    m.kernel("my_ns::magic.out", [y, z, z])
    m.kernel("aten::cos.out", [z, y, y])
    m.inputs, m.outputs = [x], [y]
    prog = _save(b, tmp_path)
    with pytest.raises(FormatError) as e:
        PteMethodRunner(prog.methods["forward"])
    msg = str(e.value)
    assert "aten::cos.out (2 calls)" in msg and "my_ns::magic.out (1 call)" in msg
    assert "aten::mm.out (" not in msg
    assert describe_pte(prog)["missing_operators"] == ["aten::cos.out", "my_ns::magic.out"]


def test_kernel_arg_count_checked_at_load(tmp_path):
    b = PteBuilder()
    m = b.method("forward")
    x, y = m.tensor(f32, (2,)), m.tensor(f32, (2,))
    m.kernel("aten::add.out", [x, x, y, y])          # alpha missing
    m.inputs, m.outputs = [x], [y]
    with pytest.raises(FormatError, match="schema has 4.*5 expected"):
        PteMethodRunner(_save(b, tmp_path).methods["forward"])


def test_runtime_errors(tmp_path):
    b = PteBuilder()
    seg = b.add_segment(qnn_wrap(b"c"))
    m = b.method("forward")
    x, y, z = m.tensor(f32, (2, 3)), m.tensor(f32, (2, 3)), m.tensor(f32, (2, 3))
    m.delegate_call(m.delegate("QnnBackend", segment=seg), [x, y])
    m.kernel("aten::mm.out", [y, y, z, z])           # (2,3)@(2,3): fails at run time
    m.inputs, m.outputs = [x], [z]
    meth = _save(b, tmp_path).methods["forward"]
    with pytest.raises(QnnrtError, match="delegate_runner"):
        PteMethodRunner(meth)
    r = PteMethodRunner(meth, lambda i, xs: [xs[0], xs[0]])
    with pytest.raises(QnnrtError, match="returned 2 output"):
        r.run([np.zeros((2, 3), f32)])
    r = PteMethodRunner(meth, lambda i, xs: [np.zeros((3, 3), f32)])
    with pytest.raises(QnnrtError, match="shape"):
        r.run([np.zeros((2, 3), f32)])
    r = PteMethodRunner(meth, lambda i, xs: [xs[0].reshape(-1)])    # same size: reshaped
    with pytest.raises(KernelError, match="instruction 1.*cannot be multiplied"):
        r.run([np.zeros((2, 3), f32)])
    with pytest.raises(InputError, match="shape"):
        r.run([np.zeros((3, 2), f32)])
    with pytest.raises(InputError, match="takes 1 input"):
        r.run([])
    with pytest.raises(InputError, match="float32"):
        r.run([np.zeros((2, 3), np.complex64)])


def test_delegate_split_override(tmp_path):
    b = PteBuilder()
    seg = b.add_segment(qnn_wrap(b"c"))
    m = b.method("forward")
    x, y, z = m.tensor(f32, (2,)), m.tensor(f32, (2,)), m.tensor(f32, (2,))
    m.delegate_call(m.delegate("QnnBackend", segment=seg), [x, y, z])
    m.inputs, m.outputs = [x], [y, z]
    meth = _save(b, tmp_path).methods["forward"]
    r = PteMethodRunner(meth, lambda i, xs: [xs[0] + 1, xs[0] + 2])
    assert [list(a) for a in r.run([np.zeros(2, f32)])] == [[1, 1], [2, 2]]
    with pytest.raises(FormatError, match="said to take 5"):
        PteMethodRunner(meth, lambda i, xs: xs, delegate_num_inputs={0: 5})


@pytest.mark.skipif(not (FIXTURES / "many_4_fp16" / "model.pte").exists(),
                    reason="ExecuTorch fixtures not available")
def test_fixture_many_4_dataflow():
    """The real file: each delegate gets (block input, CPU mm result) in graph-input order."""
    with read_pte(FIXTURES / "many_4_fp16" / "model.pte", require_qnn=True) as prog:
        meth = prog.methods["forward"]
        weights = [meth.constant(i) for i, v in enumerate(meth.values)
                   if v.kind == "tensor" and v.value.is_constant]
        seen = []

        def runner(i, xs):
            seen.append((i, [x.copy() for x in xs]))
            return [xs[0] + xs[1]] if i < 3 else [xs[0] + xs[1]]

        r = PteMethodRunner(meth, runner)
        x = np.load(FIXTURES / "many_4_fp16" / "forward_input_0.npy")
        out = r.run([x])[0]
    h = x
    for i in range(4):
        mm = h @ weights[i]
        d, ins = seen[i]
        assert d == i
        # graph inputs: delegates 0-2 take (input_0 = block input, input_1 = mm);
        # delegate 3's names are input_0_aten_mm_default_3, input_1_aten_add_tensor_8
        expect = [h, mm] if i < 3 else [mm, h]
        for a, e in zip(ins, expect):
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
        h = h + mm
    np.testing.assert_allclose(out, h, rtol=1e-5, atol=1e-5)


def test_dim_order_constants_and_delegate_layout(tmp_path):
    """Tensors with a non-default dim order: constants read in logical layout; delegates get and give
    the physical (dim-ordered) memory layout, kernels see logical arrays."""
    C = np.arange(24, dtype=f32).reshape(2, 3, 4)
    b = PteBuilder()
    seg = b.add_segment(qnn_wrap(b"c"))
    m = b.method("forward")
    c = m.constant(C, dim_order=(0, 2, 1))
    x = m.tensor(f32, (2, 3, 4), dim_order=(0, 2, 1))
    y = m.tensor(f32, (2, 3, 4), dim_order=(0, 2, 1))
    z = m.tensor(f32, (2, 3, 4))
    m.delegate_call(m.delegate("QnnBackend", segment=seg), [x, y])
    m.kernel("aten::add.out", [y, c, m.int(1), z, z])
    m.inputs, m.outputs = [x], [z]
    prog = _save(b, tmp_path)
    meth = prog.methods["forward"]
    np.testing.assert_array_equal(meth.constant(c), C)
    seen = []

    def runner(i, xs):
        seen.append(xs[0].shape)
        return [xs[0] * 10]          # physical in, physical out

    X = rng.standard_normal((2, 3, 4)).astype(f32)
    out = PteMethodRunner(meth, runner).run([X])[0]
    assert seen == [(2, 4, 3)]
    np.testing.assert_allclose(out, X * 10 + C, rtol=1e-6)
