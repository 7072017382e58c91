"""CPU kernels of qnnrt.executorch.kernels against numpy references (PyTorch semantics)."""
import numpy as np
import pytest

from qnnrt.executorch import kernels as K
from qnnrt.executorch.kernels import OutInfo, run_kernel

f16, f32, f64 = np.float16, np.float32, np.float64
i8, u8, i32, i64 = np.int8, np.uint8, np.int32, np.int64

REQUIRED = [
    "aten::mm.out", "aten::bmm.out", "aten::addmm.out", "aten::linear.out", "aten::add.out",
    "aten::sub.out", "aten::mul.out", "aten::div.out", "aten::sum.IntList_out", "aten::mean.out",
    "aten::view_copy.out", "aten::permute_copy.out", "aten::transpose_copy.int_out", "aten::cat.out",
    "aten::slice_copy.Tensor_out", "aten::select_copy.int_out", "aten::expand_copy.out",
    "aten::unsqueeze_copy.out", "aten::squeeze_copy.dims_out", "aten::clone.out",
    "aten::_to_copy.out", "quantized_decomposed::quantize_per_tensor.out",
    "quantized_decomposed::dequantize_per_tensor.out",
]

rng = np.random.default_rng(0)


def out(dtype, shape=None):
    return OutInfo(np.dtype(dtype), None if shape is None else tuple(shape))


def r(*shape, dtype=f32):
    return rng.standard_normal(shape).astype(dtype)


def test_registry_has_every_required_operator():
    assert K.missing_operators(REQUIRED) == []
    assert K.missing_operators(["aten::mm.out", "aten::foo.out", "aten::foo.out", "x::y"]) == \
        ["aten::foo.out", "x::y"]
    with pytest.raises(K.KernelError, match="aten::nope"):
        K.get_kernel("aten::nope.out")


# --- promotion ----------------------------------------------------------------------------------

@pytest.mark.parametrize("a,b,expected", [
    (np.ones(2, i32), 2.5, f32),                    # float scalar -> default float
    (np.ones(2, f16), 2.5, f16),                    # same category: tensor wins
    (np.ones(2, f16), np.ones(2, i64), f16),        # float16 + int64 -> float16 (numpy: float64)
    (np.ones(2, i8), np.array(300, i64), i8),       # zero-dim of same category does not widen
    (np.ones(2, u8), np.array(1.0, f64), f64),      # zero-dim of higher category decides
    (np.ones(2, bool), 3, i64),                     # bool tensor + int scalar
    (np.ones(2, bool), True, bool),
    (np.ones(2, i8), np.ones(2, u8), np.int16),
    (np.ones(2, f16), np.ones(2, f32), f32),
    (np.ones(2, i32), np.ones(2, i64), i64),
    (np.array(1, i32), 1.5, f32),
])
def test_result_type(a, b, expected):
    assert K.result_type(a, b) == np.dtype(expected)


def test_can_cast():
    assert K.can_cast(i64, f16) and K.can_cast(f64, f16) and K.can_cast(bool, i8)
    assert not K.can_cast(f32, i32) and not K.can_cast(i32, bool)


# --- elementwise --------------------------------------------------------------------------------

def test_add_broadcast_alpha_float():
    a, b = r(2, 1, 3), r(4, 1)
    got = run_kernel("aten::add.out", [a, b, 2.0], out(f32, (2, 4, 3)))
    np.testing.assert_allclose(got, a + 2.0 * b, rtol=1e-6)
    assert got.shape == (2, 4, 3) and got.dtype == f32


def test_add_int_with_int_alpha_and_wraparound():
    a = np.array([100, -100], i8)
    b = np.array([100, -100], i8)
    got = run_kernel("aten::add.out", [a, b, 1], out(i8))
    np.testing.assert_array_equal(got, (a.astype(np.int64) + b).astype(i8))   # wraps like torch
    with pytest.raises(K.KernelError, match="alpha must not be a floating"):
        run_kernel("aten::add.out", [a, b, 1.5], out(i8))


def test_add_mixed_dtypes_promote_then_cast_to_out():
    a = np.array([1, 2, 3], i32)
    b = np.array([0.5, 0.25, 0.125], f16)
    got = run_kernel("aten::add.out", [a, b, 1], out(f32))
    # common dtype float16: rounded to half first, then widened to the float32 out
    np.testing.assert_array_equal(got, (a.astype(f32) + b.astype(f32)).astype(f16).astype(f32))
    with pytest.raises(K.KernelError, match="can't be cast"):
        run_kernel("aten::add.out", [a, b, 1], out(i32))


def test_add_half_uses_float_opmath():
    a = np.array([2048.0], f16)
    b = np.array([1.0], f16)
    got = run_kernel("aten::add.out", [a, b, 3], out(f16))
    assert got.dtype == f16
    assert got[0] == np.float16(np.float32(2048) + 3 * np.float32(1))


def test_add_scalar_and_bool():
    a = np.array([1.0, 2.0], f32)
    np.testing.assert_array_equal(run_kernel("aten::add.Scalar_out", [a, 2, 3], out(f32)), a + 6)
    t = np.array([True, False])
    np.testing.assert_array_equal(run_kernel("aten::add.out", [t, np.array([False, False]), 1],
                                             out(bool)), [True, False])


def test_sub():
    a, b = r(3, 4), r(4)
    np.testing.assert_allclose(run_kernel("aten::sub.out", [a, b, 0.5], out(f32)), a - 0.5 * b,
                               rtol=1e-6)
    np.testing.assert_array_equal(
        run_kernel("aten::sub.out", [np.array([5], i64), np.array([7], i64), 2], out(i64)), [-9])
    with pytest.raises(K.KernelError, match="bool"):
        run_kernel("aten::sub.out", [np.array([True]), np.array([False]), 1], out(bool))
    np.testing.assert_array_equal(run_kernel("aten::sub.Scalar_out", [np.array([5.0], f32), 1.5, 2],
                                             out(f32)), [2.0])


def test_mul_broadcast_and_dtypes():
    a, b = r(2, 3, 1), r(1, 4)
    np.testing.assert_allclose(run_kernel("aten::mul.out", [a, b], out(f32)), a * b, rtol=1e-6)
    ai = np.arange(6, dtype=i32).reshape(2, 3)
    got = run_kernel("aten::mul.out", [ai, np.array([1.5], f32)], out(f32))
    np.testing.assert_array_equal(got, ai * np.float32(1.5))
    np.testing.assert_array_equal(run_kernel("aten::mul.Scalar_out", [ai, 2], out(i32)), ai * 2)
    np.testing.assert_array_equal(
        run_kernel("aten::mul.out", [np.array([True, True]), np.array([True, False])], out(bool)),
        [True, False])


def test_div_true_division():
    a, b = r(3, 4), r(4) + 3
    np.testing.assert_allclose(run_kernel("aten::div.out", [a, b], out(f32)), a / b, rtol=1e-6)
    got = run_kernel("aten::div.out", [np.array([1, 2, 3], i64), np.array([2, 0, -2], i64)],
                     out(f32))
    assert got.dtype == f32
    np.testing.assert_array_equal(got, [0.5, np.inf, -1.5])
    with pytest.raises(K.KernelError, match="can't be cast"):   # int / int is float: no int out
        run_kernel("aten::div.out", [np.array([4], i64), np.array([2], i64)], out(i64))


def test_div_rounding_modes():
    a = np.array([-7, 7, -7, 7, 6], i64)
    b = np.array([2, 2, -2, -2, 3], i64)
    trunc = run_kernel("aten::div.out_mode", [a, b, "trunc"], out(i64))
    floor = run_kernel("aten::div.out_mode", [a, b, "floor"], out(i64))
    np.testing.assert_array_equal(trunc, [-3, 3, 3, -3, 2])
    np.testing.assert_array_equal(floor, [-4, 3, 3, -4, 2])
    af = np.array([-7.5, 7.5, -7.0, 1.0], f32)
    bf = np.array([2.0, 2.0, -2.0, 0.0], f32)
    np.testing.assert_array_equal(run_kernel("aten::div.out_mode", [af, bf, "trunc"], out(f32)),
                                  [-3.0, 3.0, 3.0, np.inf])
    np.testing.assert_array_equal(run_kernel("aten::div.out_mode", [af, bf, "floor"], out(f32)),
                                  [-4.0, 3.0, 3.0, np.inf])
    np.testing.assert_array_equal(
        run_kernel("aten::div.out_mode", [af, bf[:1], None], out(f32)), af / np.float32(2.0))
    with pytest.raises(K.KernelError, match="ZeroDivision"):
        run_kernel("aten::div.out_mode", [a, np.zeros(5, i64), "floor"], out(i64))
    with pytest.raises(K.KernelError, match="rounding_mode"):
        run_kernel("aten::div.out_mode", [af, bf, "round"], out(f32))
    np.testing.assert_array_equal(run_kernel("aten::div.Scalar_mode_out", [a, 2, "floor"], out(i64)),
                                  np.floor_divide(a, 2))
    np.testing.assert_allclose(run_kernel("aten::div.Scalar_out", [af, 4.0], out(f32)), af / 4)


def test_broadcast_error():
    with pytest.raises(K.KernelError, match="broadcastable"):
        run_kernel("aten::add.out", [r(2, 3), r(4), 1], out(f32))


# --- matrix products ----------------------------------------------------------------------------

def test_mm_bmm():
    a, b = r(3, 5), r(5, 2)
    np.testing.assert_allclose(run_kernel("aten::mm.out", [a, b], out(f32, (3, 2))), a @ b,
                               rtol=1e-5)
    ai, bi = np.arange(6, dtype=i64).reshape(2, 3), np.arange(6, dtype=i64).reshape(3, 2)
    np.testing.assert_array_equal(run_kernel("aten::mm.out", [ai, bi], out(i64)), ai @ bi)
    with pytest.raises(K.KernelError, match="cannot be multiplied"):
        run_kernel("aten::mm.out", [a, a], out(f32))
    with pytest.raises(K.KernelError, match="same dtype"):
        run_kernel("aten::mm.out", [a, b.astype(f16)], out(f32))
    with pytest.raises(K.KernelError, match="out tensor"):
        run_kernel("aten::mm.out", [a, b], out(f16))
    x, y = r(4, 3, 5), r(4, 5, 2)
    np.testing.assert_allclose(run_kernel("aten::bmm.out", [x, y], out(f32)), x @ y, rtol=1e-5)
    with pytest.raises(K.KernelError):
        run_kernel("aten::bmm.out", [x, r(3, 5, 2)], out(f32))


def test_mm_half_accumulates_in_float():
    a, b = r(4, 64, dtype=f16), r(64, 3, dtype=f16)
    got = run_kernel("aten::mm.out", [a, b], out(f16))
    assert got.dtype == f16
    np.testing.assert_array_equal(got, (a.astype(f32) @ b.astype(f32)).astype(f16))


def test_addmm_linear():
    s, m1, m2 = r(3), r(2, 4), r(4, 3)
    got = run_kernel("aten::addmm.out", [s, m1, m2, 0.5, 2.0], out(f32, (2, 3)))
    np.testing.assert_allclose(got, 0.5 * s + 2.0 * (m1 @ m2), rtol=1e-5)
    nan = np.full(3, np.nan, f32)
    got0 = run_kernel("aten::addmm.out", [nan, m1, m2, 0, 1], out(f32))     # beta=0 ignores self
    np.testing.assert_allclose(got0, m1 @ m2, rtol=1e-5)
    x, w, bias = r(2, 5, 4), r(3, 4), r(3)
    np.testing.assert_allclose(run_kernel("aten::linear.out", [x, w, bias], out(f32, (2, 5, 3))),
                               x @ w.T + bias, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run_kernel("aten::linear.out", [x, w, None], out(f32)), x @ w.T,
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(K.KernelError):
        run_kernel("aten::linear.out", [x, r(3, 5), None], out(f32))


# --- reductions ---------------------------------------------------------------------------------

def test_sum():
    x = r(2, 3, 4)
    np.testing.assert_allclose(run_kernel("aten::sum.IntList_out", [x, [1], False, None],
                                          out(f32, (2, 4))), x.sum(1), rtol=1e-6)
    np.testing.assert_allclose(run_kernel("aten::sum.IntList_out", [x, [-1, 0], True, None],
                                          out(f32, (1, 3, 1))), x.sum((0, 2), keepdims=True),
                               rtol=1e-5)
    np.testing.assert_allclose(run_kernel("aten::sum.IntList_out", [x, None, False, None], out(f32)),
                               x.sum(), rtol=1e-5)
    np.testing.assert_allclose(run_kernel("aten::sum.IntList_out", [x, [], False, None], out(f32)),
                               x.sum(), rtol=1e-5)
    xi = np.arange(12, dtype=i8).reshape(3, 4) * 20      # would overflow int8
    got = run_kernel("aten::sum.IntList_out", [xi, [1], False, None], out(i64))
    assert got.dtype == i64
    np.testing.assert_array_equal(got, xi.astype(i64).sum(1))
    got = run_kernel("aten::sum.IntList_out", [xi, [1], False, 6], out(f32))   # dtype=FLOAT
    np.testing.assert_array_equal(got, xi.astype(f32).sum(1))
    with pytest.raises(K.KernelError, match="multiple times"):
        run_kernel("aten::sum.IntList_out", [x, [1, -2], False, None], out(f32))
    with pytest.raises(K.KernelError, match="out of range"):
        run_kernel("aten::sum.IntList_out", [x, [3], False, None], out(f32))


def test_mean():
    x = r(2, 3, 4)
    np.testing.assert_allclose(run_kernel("aten::mean.out", [x, [2], True, None], out(f32, (2, 3, 1))),
                               x.mean(2, keepdims=True), rtol=1e-6)
    xh = x.astype(f16)
    got = run_kernel("aten::mean.out", [xh, [0, 1], False, None], out(f16))
    assert got.dtype == f16
    np.testing.assert_array_equal(got, xh.astype(f32).mean((0, 1)).astype(f16))
    with pytest.raises(K.KernelError, match="floating point"):
        run_kernel("aten::mean.out", [np.arange(4, dtype=i64), [0], False, None], out(i64))
    np.testing.assert_allclose(run_kernel("aten::mean.out",
                                          [np.arange(4, dtype=i64), [0], False, 6], out(f32)), 1.5)


# --- shape / copy ops ---------------------------------------------------------------------------

def test_view_permute_transpose():
    x = r(2, 3, 4)
    got = run_kernel("aten::view_copy.out", [x, [4, -1]], out(f32, (4, 6)))
    np.testing.assert_array_equal(got, x.reshape(4, 6))
    assert not np.shares_memory(got, x)
    with pytest.raises(K.KernelError, match="invalid for input"):
        run_kernel("aten::view_copy.out", [x, [5, -1]], out(f32))
    np.testing.assert_array_equal(run_kernel("aten::permute_copy.out", [x, [2, 0, -2]], out(f32)),
                                  x.transpose(2, 0, 1))
    with pytest.raises(K.KernelError):
        run_kernel("aten::permute_copy.out", [x, [0, 0, 1]], out(f32))
    got = run_kernel("aten::transpose_copy.int_out", [x, 0, -1], out(f32))
    np.testing.assert_array_equal(got, np.swapaxes(x, 0, 2))
    assert got.flags.c_contiguous


def test_cat():
    a, b = r(2, 3), r(2, 5)
    np.testing.assert_array_equal(run_kernel("aten::cat.out", [[a, b], 1], out(f32, (2, 8))),
                                  np.concatenate([a, b], 1))
    np.testing.assert_array_equal(run_kernel("aten::cat.out", [[a, b[:, :3]], -2], out(f32)),
                                  np.concatenate([a, b[:, :3]], 0))
    # promotion across inputs, legacy empty tensors skipped
    ai = np.ones((2, 3), i32)
    got = run_kernel("aten::cat.out", [[ai, np.zeros((0,), f32), a], 0], out(f32))
    assert got.dtype == f32 and got.shape == (4, 3)
    with pytest.raises(K.KernelError, match="must match"):
        run_kernel("aten::cat.out", [[a, r(3, 5)], 0], out(f32))


def test_slice_select():
    x = np.arange(24, dtype=f32).reshape(2, 12)
    np.testing.assert_array_equal(
        run_kernel("aten::slice_copy.Tensor_out", [x, 1, 2, 10, 3], out(f32)), x[:, 2:10:3])
    np.testing.assert_array_equal(
        run_kernel("aten::slice_copy.Tensor_out", [x, -1, -5, None, 1], out(f32)), x[:, -5:])
    np.testing.assert_array_equal(
        run_kernel("aten::slice_copy.Tensor_out", [x, 1, None, 100, 1], out(f32)), x)
    assert run_kernel("aten::slice_copy.Tensor_out", [x, 1, 8, 2, 1], out(f32)).shape == (2, 0)
    with pytest.raises(K.KernelError, match="step"):
        run_kernel("aten::slice_copy.Tensor_out", [x, 1, 0, 5, 0], out(f32))
    np.testing.assert_array_equal(run_kernel("aten::select_copy.int_out", [x, 1, -1], out(f32)),
                                  x[:, -1])
    np.testing.assert_array_equal(run_kernel("aten::select_copy.int_out", [x, 0, 1], out(f32)), x[1])
    with pytest.raises(K.KernelError, match="out of range"):
        run_kernel("aten::select_copy.int_out", [x, 0, 2], out(f32))


def test_expand_unsqueeze_squeeze():
    x = r(3, 1)
    got = run_kernel("aten::expand_copy.out", [x, [2, -1, 4], False], out(f32, (2, 3, 4)))
    np.testing.assert_array_equal(got, np.broadcast_to(x, (2, 3, 4)))
    assert got.flags.writeable
    with pytest.raises(K.KernelError, match="must match"):
        run_kernel("aten::expand_copy.out", [x, [2, 4], False], out(f32))
    with pytest.raises(K.KernelError, match="leading"):
        run_kernel("aten::expand_copy.out", [x, [-1, 3, 4], False], out(f32))
    assert run_kernel("aten::unsqueeze_copy.out", [x, -1], out(f32)).shape == (3, 1, 1)
    assert run_kernel("aten::unsqueeze_copy.out", [x, 0], out(f32)).shape == (1, 3, 1)
    with pytest.raises(K.KernelError):
        run_kernel("aten::unsqueeze_copy.out", [x, 3], out(f32))
    y = r(1, 3, 1, 2)
    assert run_kernel("aten::squeeze_copy.dims_out", [y, [0, 2]], out(f32)).shape == (3, 2)
    assert run_kernel("aten::squeeze_copy.dims_out", [y, [1, -2]], out(f32)).shape == (1, 3, 2)
    assert run_kernel("aten::squeeze_copy.dim_out", [y, 1], out(f32)).shape == (1, 3, 1, 2)


def test_clone_to_copy():
    x = np.array([[-1.7, 0.0, 2.9]], f32)
    c = run_kernel("aten::clone.out", [x, None], out(f32))
    np.testing.assert_array_equal(c, x)
    assert not np.shares_memory(c, x)
    np.testing.assert_array_equal(run_kernel("aten::_to_copy.out", [x, False, None], out(i32)),
                                  [[-1, 0, 2]])                       # truncation toward zero
    np.testing.assert_array_equal(run_kernel("aten::_to_copy.out", [x, False, None], out(bool)),
                                  [[True, False, True]])
    got = run_kernel("aten::_to_copy.out", [x, False, None], out(f16))
    assert got.dtype == f16
    # copy ops copy into any out dtype (Tensor.copy_ semantics)
    assert run_kernel("aten::view_copy.out", [x, [3]], out(f16)).dtype == f16


# --- quantized_decomposed -----------------------------------------------------------------------

def test_quantize_dequantize_per_tensor():
    x = np.array([-1.0, -0.0501, 0.0, 0.05, 0.1, 0.125, 10.0], f32)
    scale, zp = 0.05, 3
    q = run_kernel("quantized_decomposed::quantize_per_tensor.out", [x, scale, zp, -128, 127, 1],
                   out(i8))
    ref = np.clip(np.round(x * np.float32(1.0 / scale)) + zp, -128, 127).astype(i8)
    np.testing.assert_array_equal(q, ref)
    assert q.dtype == i8 and q[-1] == 127
    # round half to even: 0.125 / 0.05 = 2.5 -> 2
    qu = run_kernel("quantized_decomposed::quantize_per_tensor.out",
                    [np.array([0.125], f32), 0.05, 0, 0, 255, 0], out(u8))
    assert qu[0] == 2
    d = run_kernel("quantized_decomposed::dequantize_per_tensor.out",
                   [q, scale, zp, -128, 127, 1, None], out(f32))
    np.testing.assert_allclose(d, (q.astype(f32) - zp) * np.float32(scale), rtol=1e-7)
    assert d.dtype == f32
    with pytest.raises(K.KernelError, match="dtype"):
        run_kernel("quantized_decomposed::dequantize_per_tensor.out",
                   [q, scale, zp, -128, 127, 0, None], out(f32))
    # Tensor_out variants take the parameters as tensors
    q2 = run_kernel("quantized_decomposed::quantize_per_tensor.Tensor_out",
                    [x, np.array([scale], f64), np.array([zp], i64), -128, 127, 1], out(i8))
    np.testing.assert_array_equal(q2, q)
