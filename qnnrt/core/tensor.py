"""Tensor specs read from a context binary, and the owned Qnn_Tensor_t structs used to execute."""
from __future__ import annotations

import ctypes as C
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from qnnrt._capi import types as T
from qnnrt.errors import FormatError, InputError, QnnrtError


@dataclass(frozen=True)
class Quantization:
    """Scale/offset quantization of a fixed-point tensor: real = scale * (q + offset)."""
    encoding: str
    scale: float
    offset: int
    bitwidth: int | None = None

    def to_dict(self) -> dict:
        return {"encoding": self.encoding, "scale": self.scale, "offset": self.offset,
                **({"bitwidth": self.bitwidth} if self.bitwidth else {})}


@dataclass(frozen=True)
class TensorSpec:
    """What a graph input/output looks like, copied out of QNN-owned memory."""
    name: str
    id: int
    tensor_type: int
    data_type: int
    shape: tuple[int, ...]
    quantization: Quantization | None
    version: int = 1
    data_format: int = 0

    @property
    def dtype(self) -> np.dtype:
        """numpy dtype of the buffer QNN reads/writes (fixed point: the storage integer)."""
        name = T.DATA_TYPE_NUMPY.get(self.data_type)
        if name is None:
            raise FormatError(f"tensor {self.name!r} has QNN data type "
                              f"{T.DATA_TYPE_NAMES.get(self.data_type, hex(self.data_type))}, "
                              f"which qnnrt cannot map to numpy")
        return np.dtype(name)

    @property
    def data_type_name(self) -> str:
        return T.DATA_TYPE_NAMES.get(self.data_type, hex(self.data_type))

    @property
    def is_fixed_point(self) -> bool:
        return self.data_type in T.FIXED_POINT_TYPES

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def to_dict(self) -> dict:
        return {"name": self.name, "dtype": self.data_type_name,
                "numpy_dtype": T.DATA_TYPE_NUMPY.get(self.data_type), "shape": list(self.shape),
                "quantization": self.quantization.to_dict() if self.quantization else None}

    # -- numeric conversion for fixed-point I/O -------------------------------------------
    def _quant(self) -> Quantization:
        if self.quantization is None:
            raise QnnrtError(f"{self.name}: {self.data_type_name} tensor has no quantization parameters "
                             "(scale / offset) to convert with")
        return self.quantization

    def quantize(self, x: np.ndarray) -> np.ndarray:
        q = self._quant()
        info = np.iinfo(self.dtype)
        vals = np.rint(np.asarray(x, np.float64) / q.scale) - q.offset
        return np.clip(vals, info.min, info.max).astype(self.dtype)

    def dequantize(self, q_values: np.ndarray) -> np.ndarray:
        q = self._quant()
        return ((q_values.astype(np.float64) + q.offset) * q.scale).astype(np.float32)


def spec_from_struct(t: T.Tensor) -> TensorSpec:
    """Copy a Qnn_Tensor_t (v1/v2) into a TensorSpec; QNN frees the original with its owner."""
    if t.version not in (1, 2):
        raise FormatError(f"unknown Qnn_Tensor_t version {t.version} in binary info")
    b = t.body
    shape = tuple(int(b.dimensions[i]) for i in range(b.rank)) if b.rank else ()
    qp = b.quantizeParams
    quant = None
    if qp.encodingDefinition == T.DEFINITION_DEFINED:
        enc = qp.quantizationEncoding
        if enc == T.QUANT_SCALE_OFFSET:
            quant = Quantization("scale_offset", float(qp.scaleOffsetEncoding.scale),
                                 int(qp.scaleOffsetEncoding.offset))
        elif enc == T.QUANT_BW_SCALE_OFFSET:
            bw = qp.bwScaleOffsetEncoding
            quant = Quantization("bw_scale_offset", float(bw.scale), int(bw.offset),
                                 int(bw.bitwidth))
        else:
            quant = Quantization(T.QUANT_ENCODINGS.get(enc, str(enc)).lower(), float("nan"), 0)
    return TensorSpec(name=(b.name or b"").decode(errors="replace"), id=int(b.id),
                      tensor_type=int(b.type), data_type=int(b.dataType), shape=shape,
                      quantization=quant, version=int(t.version), data_format=int(b.dataFormat))


class IOTensor:
    """An owned Qnn_Tensor_t describing one graph input or output, with its name/dims storage and a
    buffer allocated once and reused by every execution."""

    def __init__(self, spec: TensorSpec):
        self.spec = spec
        self.struct = T.Tensor()
        self.struct.version = spec.version
        b = self.struct.body
        self._name = C.c_char_p(spec.name.encode())
        self._dims = (C.c_uint32 * max(1, len(spec.shape)))(*spec.shape)
        b.id = spec.id
        b.name = self._name
        b.type = spec.tensor_type
        b.dataFormat = spec.data_format
        b.dataType = spec.data_type
        qp = b.quantizeParams
        q = spec.quantization
        if q is None:
            qp.encodingDefinition = T.UNDEFINED_ENUM
            qp.quantizationEncoding = T.UNDEFINED_ENUM
        elif q.encoding == "scale_offset":
            qp.encodingDefinition = T.DEFINITION_DEFINED
            qp.quantizationEncoding = T.QUANT_SCALE_OFFSET
            qp.scaleOffsetEncoding.scale = q.scale
            qp.scaleOffsetEncoding.offset = q.offset
        elif q.encoding == "bw_scale_offset":
            qp.encodingDefinition = T.DEFINITION_DEFINED
            qp.quantizationEncoding = T.QUANT_BW_SCALE_OFFSET
            qp.bwScaleOffsetEncoding.bitwidth = q.bitwidth or 0
            qp.bwScaleOffsetEncoding.scale = q.scale
            qp.bwScaleOffsetEncoding.offset = q.offset
        else:
            raise FormatError(f"graph tensor {spec.name!r} uses quantization encoding "
                              f"{q.encoding}, which qnnrt does not support for graph I/O")
        b.rank = len(spec.shape)
        b.dimensions = self._dims
        b.memType = T.TENSORMEMTYPE_RAW
        self.buffer = np.zeros(spec.shape, spec.dtype)
        self.bind(self.buffer)

    def bind(self, arr: np.ndarray) -> None:
        """Point the struct at `arr` (C-contiguous, right dtype and size; the caller keeps it alive)."""
        b = self.struct.body
        b.clientBuf.data = arr.ctypes.data
        b.clientBuf.dataSize = arr.nbytes


class InputSpec(Protocol):
    """What prepare_input reads of a spec: a TensorSpec, or a runtime IOSpec wrapping one."""
    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> tuple: ...
    @property
    def dtype(self) -> np.dtype: ...
    def quantize(self, x: np.ndarray) -> np.ndarray: ...


def address_of(arr: np.ndarray) -> int:
    """The address of an array's data (for bindings that take a raw pointer, e.g. ORT IOBinding)."""
    return arr.ctypes.data


def order_inputs(names: Sequence[str], inputs: Any, where: str) -> list:
    """Inputs by name (a mapping), in order (a sequence) or one array -> values in `names` order."""
    if isinstance(inputs, np.ndarray):
        inputs = [inputs]
    if isinstance(inputs, Mapping):
        unknown = sorted(str(k) for k in inputs if k not in names)
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            raise InputError(f"{where}: " + "; ".join(
                ([f"unknown input(s) {unknown}"] if unknown else [])
                + ([f"missing input(s) {missing}"] if missing else []))
                + f". Expected inputs: {list(names)}")
        return [inputs[n] for n in names]
    if not isinstance(inputs, Sequence) or isinstance(inputs, (str, bytes)):
        raise InputError(f"{where}: inputs must be a dict by name or a sequence of arrays")
    if len(inputs) != len(names):
        raise InputError(f"{where}: got {len(inputs)} input(s), expected {len(names)} ({list(names)})")
    return list(inputs)


def prepare_input(spec: InputSpec, value: object, where: str) -> np.ndarray:
    """Validate one input and return a C-contiguous array of the tensor's storage dtype.

    Floats go to float tensors (cast between float widths) and to fixed-point tensors (quantized with
    the tensor's scale/offset); integers must match the storage dtype exactly.
    """
    arr = np.asarray(value)
    if len(arr.shape) != len(spec.shape) or any(
            want is not None and want != got for want, got in zip(spec.shape, arr.shape)):
        raise InputError(f"{where}: input {spec.name!r} has shape {tuple(arr.shape)}, expected "
                         f"{spec.shape}")
    want = spec.dtype
    if arr.dtype == want:
        return arr if arr.flags.c_contiguous else arr.copy(order="C")  # 0-d stays 0-d
    if getattr(spec, "is_fixed_point", False) and arr.dtype.kind == "f":
        return spec.quantize(arr)
    if want.kind == "f" and arr.dtype.kind == "f":
        return arr.astype(want, order="C")
    raise InputError(f"{where}: input {spec.name!r} has dtype {arr.dtype}, expected {want}"
                     + (" (or a float array, quantized with the tensor's scale/offset)"
                        if getattr(spec, "is_fixed_point", False) else ""))
