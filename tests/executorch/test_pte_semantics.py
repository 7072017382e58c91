"""ExecuTorch semantics the numpy kernels and the interpreter must keep (found by review, checked
against PyTorch 2.13): integer scalars wrap, *_copy kernels always copy and keep 0-d results 0-d,
squeeze rejects repeated dims, outputs never alias the caller's inputs, mutable state persists
across runs, 0-d inputs run through the program adapter."""
import numpy as np
import pytest
from qnnrt.errors import KernelError
from qnnrt.executorch import kernels as K
from qnnrt.executorch.reader import read_pte
from qnnrt.executorch.interpreter import PteMethodRunner
from qnnrt.executorch.program import PteMethodAdapter
from tests.helpers.pte_writer import PteBuilder

I8, U8, F32 = np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.float32)


@pytest.mark.parametrize("op,args,dt,expected", [
    ("aten::add.Scalar_out", [np.array([100, -100, 5], np.int8), 300, 1], I8, [-112, -56, 49]),
    ("aten::add.Scalar_out", [np.array([0, 1, 250], np.uint8), -1, 1], U8, [255, 0, 249]),
    ("aten::sub.Scalar_out", [np.array([0, 1, 250], np.uint8), -1, 1], U8, [1, 2, 251]),
    ("aten::mul.Scalar_out", [np.array([0, 1, 250], np.uint8), -2], U8, [0, 254, 12]),
])
def test_int_scalar_outside_tensor_dtype_range_wraps_like_torch(op, args, dt, expected):
    r = K.run_kernel(op, args, K.OutInfo(dt))
    np.testing.assert_array_equal(r, np.array(expected, dt))


def test_select_on_1d_returns_0d():
    r = K.run_kernel("aten::select_copy.int_out", [np.array([1., 2., 3.], F32), 0, 1], K.OutInfo(F32, ()))
    assert r.shape == ()          # torch.select(t1d, 0, 1).shape == torch.Size([])


def test_permute_0d_returns_0d():
    r = K.run_kernel("aten::permute_copy.out", [np.array(1., F32), []], K.OutInfo(F32, ()))
    assert r.shape == ()


def test_slice_copy_returns_a_copy():
    x = np.arange(12, dtype=F32).reshape(4, 3)
    r = K.run_kernel("aten::slice_copy.Tensor_out", [x, 0, 0, 2, 1], K.OutInfo(F32))
    assert not np.shares_memory(r, x)


def test_permute_identity_returns_a_copy():
    x = np.arange(6, dtype=F32).reshape(2, 3)
    r = K.run_kernel("aten::permute_copy.out", [x, [0, 1]], K.OutInfo(F32))
    assert not np.shares_memory(r, x)


def test_squeeze_duplicate_dims_rejected_like_torch():
    # torch: RuntimeError: dim 0 appears multiple times in the list of dims
    with pytest.raises(K.KernelError):
        K.run_kernel("aten::squeeze_copy.dims_out", [np.zeros((1, 3), F32), [0, 0]], K.OutInfo(F32))


f32 = np.float32

def _prog(b, tmp_path):
    p = tmp_path / "m.pte"
    b.save(p)
    return read_pte(p, require_qnn=False)


def test_output_moved_from_input_aliases_caller_array(tmp_path):
    b = PteBuilder()
    m = b.method("forward")
    x = m.tensor(f32, (3,))
    y = m.tensor(f32, (3,))
    m.move(x, y)
    m.inputs, m.outputs = [x], [y]
    r = PteMethodRunner(_prog(b, tmp_path).methods["forward"])
    X = np.array([1, 2, 3], f32)
    out = r.run([X])[0]
    X[:] = 0          # caller refills its input buffer for the next iteration
    assert not np.shares_memory(out, X), f"output changed with the input: {out}"


def test_slice_copy_output_is_a_view_of_the_input(tmp_path):
    b = PteBuilder()
    m = b.method("forward")
    x = m.tensor(f32, (4, 3))
    y = m.tensor(f32, (2, 3))
    m.kernel("aten::slice_copy.Tensor_out", [x, m.int(0), m.int(0), m.int(2), m.int(1), y, y])
    m.inputs, m.outputs = [x], [y]
    r = PteMethodRunner(_prog(b, tmp_path).methods["forward"])
    X = np.arange(12, dtype=f32).reshape(4, 3)
    out = r.run([X])[0]
    before = out.copy()
    X[:] = -1
    np.testing.assert_array_equal(out, before)


def test_select_copy_of_1d_gives_0d(tmp_path):
    b = PteBuilder()
    m = b.method("forward")
    x = m.tensor(f32, (3,))
    y = m.tensor(f32, ())
    m.kernel("aten::select_copy.int_out", [x, m.int(0), m.int(-1), y, y])
    m.inputs, m.outputs = [x], [y]
    r = PteMethodRunner(_prog(b, tmp_path).methods["forward"])
    out = r.run([np.array([1, 2, 3], f32)])[0]
    assert out.shape == () and out == 3


def test_mutable_buffer_state_across_runs(tmp_path):
    """ExecuTorch loads a mutable tensor's initial data once (Method::init -> tensor_parser
    load_mutable_subsegment_into planned memory); executions update it in place and the state
    persists. (pte_writer cannot emit mutable_data_segments,
    so the constant is turned into a memory-planned tensor with initial data after reading.)"""
    import dataclasses
    b = PteBuilder()
    m = b.method("forward")
    x = m.tensor(f32, (3,))
    buf = m.constant(np.array([10, 20, 30], f32))
    m.kernel("aten::add.out", [buf, x, m.int(1), buf, buf])   # buf += x (in place, out=self)
    out = m.tensor(f32, (3,))
    m.kernel("aten::clone.out", [buf, m.null(), out, out])
    m.inputs, m.outputs = [x], [out]
    meth = _prog(b, tmp_path).methods["forward"]
    v = meth.values[buf]
    data = meth.constant(buf).copy()
    meth.values[buf] = dataclasses.replace(v, value=dataclasses.replace(v.value, allocation=(1, 0)))
    meth.constant = lambda i, _d=data: _d
    assert meth.values[buf].value.has_initial_data and not meth.values[buf].value.is_constant
    r = PteMethodRunner(meth)
    o1 = r.run([np.ones(3, f32)])[0]
    o2 = r.run([np.ones(3, f32)])[0]
    np.testing.assert_array_equal(o2, o1 + 1)

def test_zero_dim_input_through_adapter(tmp_path):
    """A .pte method with a 0-d tensor input (e.g. a scalar position) run via PteMethodAdapter."""
    b = PteBuilder()
    m = b.method("forward")
    x = m.tensor(np.int64, ())
    y = m.tensor(np.int64, ())
    m.kernel("aten::add.Scalar_out", [x, m.int(1), m.int(1), y, y])
    m.inputs, m.outputs = [x], [y]
    p = tmp_path / "m.pte"; b.save(p)
    ad = PteMethodAdapter(read_pte(p, require_qnn=False).methods["forward"], {})
    out = ad.run({ad.inputs[0].name: np.array(5, np.int64)}, None)
    assert out[ad.outputs[0].name] == 6


def test_index_tensor_is_an_embedding_lookup_and_numpy_advanced_indexing():
    """aten::index.Tensor_out: `weight[ids]` (what ExecuTorch leaves on the CPU for an embedding
    gather with int64 ids), None for a whole dimension, negative indices, boolean masks; values as
    torch.Tensor.__getitem__ gives them (torch follows NumPy's advanced-indexing rules)."""
    w = np.arange(20, dtype=F32).reshape(5, 4)
    ids = np.array([[0, 4, -1]], np.int64)
    r = K.run_kernel("aten::index.Tensor_out", [w, [ids]], K.OutInfo(F32))
    assert r.shape == (1, 3, 4) and r[0, 1].tolist() == [16, 17, 18, 19] and r[0, 2].tolist() == r[0, 1].tolist()
    cols = K.run_kernel("aten::index.Tensor_out", [w, [None, np.array([3, 0], np.int32)]], K.OutInfo(F32))
    assert cols.tolist() == [[3 + 4 * i, 4 * i] for i in range(5)]
    rows = K.run_kernel("aten::index.Tensor_out", [w, [np.array([True, False, False, True, False])]], K.OutInfo(F32))
    assert rows.tolist() == [w[0].tolist(), w[3].tolist()]


@pytest.mark.parametrize("indices,says", [
    ([np.array([5], np.int64)], "index 5 is out of bounds for dimension 0 with size 5"),
    ([np.array([-6], np.int64)], "index -6 is out of bounds"),
    ([np.array([0.5], F32)], "must be long, int or bool"),
    ([None, None, np.array([0])], "too many indices"),
])
def test_index_tensor_refuses_what_torch_refuses(indices, says):
    with pytest.raises(KernelError, match=says):
        K.run_kernel("aten::index.Tensor_out", [np.zeros((5, 4), F32), indices], K.OutInfo(F32))
