"""The binder's one-pass float32 dequantization equals TensorSpec.dequantize (the float64 path) bit
for bit, on every code of every 8/16-bit fixed-point type (no QNN needed: pure arithmetic)."""
from __future__ import annotations

import numpy as np
import pytest

from qnnrt.core.binding import Dequantizer
from qnnrt.core.tensor import Quantization, TensorSpec
from qnnrt.errors import QnnrtError

TYPES = {0x0308: np.int8, 0x0408: np.uint8, 0x0316: np.int16, 0x0416: np.uint16}


def _spec(data_type: int, scale: float, offset: int) -> TensorSpec:
    return TensorSpec("t", 0, 0, data_type, (1,), Quantization("scale_offset", scale, offset))


@pytest.mark.parametrize("data_type", sorted(TYPES))
@pytest.mark.parametrize("scale, offset", [
    (float(np.float32(0.0078125)), -128), (float(np.float32(1.3e-5)), -32768),
    (float(np.float32(0.1)), 0), (float(np.float32(3.7)), 12345), (float(np.float32(1e-30)), -7)])
def test_one_pass_equals_float64_path_on_every_code(data_type, scale, offset):
    dt = np.dtype(TYPES[data_type])
    info = np.iinfo(dt)
    codes = np.arange(info.min, info.max + 1, dtype=np.int64).astype(dt)
    spec = _spec(data_type, scale, offset)
    deq = Dequantizer(spec)
    assert deq.fast
    want = spec.dequantize(codes)
    got = deq(codes, None)
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    into = np.empty(codes.shape, np.float32)
    assert deq(codes, into) is into and np.array_equal(into, want)


def test_a_scale_float32_cannot_hold_takes_the_float64_path():
    spec = _spec(0x0408, 0.1, 3)           # 0.1 is not a float32
    deq = Dequantizer(spec)
    codes = np.arange(256, dtype=np.uint8)
    assert not deq.fast and np.array_equal(deq(codes, None), spec.dequantize(codes))


def test_no_quantization_parameters_is_a_clear_error():
    spec = TensorSpec("t", 0, 0, 0x0408, (1,), None)
    with pytest.raises(QnnrtError, match="no quantization parameters"):
        Dequantizer(spec)
