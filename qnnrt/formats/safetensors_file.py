"""A .safetensors file read with numpy alone, memory-mapped: an 8-byte little-endian header
length, a JSON header ({name: {dtype, shape, data_offsets}}), then the data. Every tensor is a
view of the map until it is converted to float32; bf16 is widened bit-exactly. A damaged file
(short header, bad JSON, offsets past the end, a size that is not its shape's) is an error naming
the file and the tensor. One reader for every safetensors file qnnrt opens: a model's weights
(convert/hf.py) and a PEFT adapter's (formats/peft.py)."""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from qnnrt.errors import FormatError

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}


def widen(raw: np.ndarray, dtype: str) -> np.ndarray:
    """float32 of a stored tensor (bf16: its 16 bits are the high half of a float32)."""
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32)


class SafetensorsFile:
    """One file's header, checked, and its tensors as memory-mapped views; ``error``: the FormatError
    kind a damaged file raises (convert's ConvertError for a model's weights)."""

    def __init__(self, path: Path, error: type[FormatError] = FormatError) -> None:
        self.path, self.error = path, error
        try:
            size = path.stat().st_size
            with open(path, "rb") as f:
                head = f.read(8)
                n = int.from_bytes(head, "little") if len(head) == 8 else -1
                if n < 2 or 8 + n > size:
                    raise self.error(f"{path}: not a safetensors file (header length {n} in a file of "
                                       f"{size} bytes); the file is truncated or of another format")
                header = json.loads(f.read(n))
        except OSError as e:
            raise self.error(f"{path}: cannot read ({e})") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise self.error(f"{path}: the safetensors header is not valid JSON ({e}); the file is "
                               f"damaged, download it again") from None
        if not isinstance(header, dict):
            raise self.error(f"{path}: the safetensors header is not a JSON object")
        header.pop("__metadata__", None)
        self.base, self.size = 8 + n, size
        self.entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, entry in header.items():
            self.entries[name] = self._check(name, entry)
        self._map = np.memmap(path, dtype=np.uint8, mode="r") if size > self.base else None

    def _check(self, name: str, e) -> tuple[str, tuple[int, ...], int, int]:
        where = f"{self.path}: tensor {name!r}"
        try:
            dtype, shape, (begin, end) = e["dtype"], tuple(int(x) for x in e["shape"]), e["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise self.error(f"{where}: header entry {e!r} lacks dtype / shape / data_offsets") from None
        if dtype not in _DTYPES:
            raise self.error(f"{where}: dtype {dtype} is not supported (F32, F16, BF16, F64 are)")
        nbytes = math.prod(shape) * np.dtype(_DTYPES[dtype]).itemsize
        if not (0 <= begin <= end and end - begin == nbytes and self.base + end <= self.size):
            raise self.error(f"{where}: data offsets {begin}..{end} do not hold {dtype}{list(shape)} "
                               f"inside the file ({self.size} bytes); the file is truncated or damaged")
        return dtype, shape, begin, end

    def raw(self, name: str) -> tuple[np.ndarray, str]:
        dtype, shape, begin, end = self.entries[name]
        if self._map is None or begin == end:
            return np.zeros(shape, _DTYPES[dtype]), dtype
        view = self._map[self.base + begin:self.base + end].view(_DTYPES[dtype]).reshape(shape)
        return view, dtype

    def float32(self, name: str) -> np.ndarray:
        view, dtype = self.raw(name)
        return widen(view, dtype)


_ENCODE = {"F32": np.float32, "F16": np.float16}


def _encoded(a: np.ndarray, dtype: str) -> bytes:
    if dtype == "BF16":                       # the high half of each float32 (truncated)
        return (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return np.ascontiguousarray(a, _ENCODE[dtype]).tobytes()


def write_safetensors(path: Path, layout: Mapping[str, tuple[tuple[int, ...], str]],
                      produce: Callable[[str], np.ndarray], metadata: dict | None = None) -> int:
    """Write a .safetensors file tensor by tensor: the header from ``layout`` (name -> shape, dtype:
    F32, F16 or BF16), then each tensor from ``produce(name)`` in the layout's order, so one tensor at
    a time is in memory. Written to PATH.partial, then renamed. Returns the file's size.

    The makers of test and benchmark models (tools/) write with it; qnnrt reads with SafetensorsFile."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    at = 0
    for name, (shape, dtype) in layout.items():
        if dtype not in ("F32", "F16", "BF16"):
            raise ValueError(f"{name}: dtype {dtype} cannot be written (F32, F16, BF16 can)")
        n = math.prod(shape) * (4 if dtype == "F32" else 2)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for name, (shape, dtype) in layout.items():
            a = produce(name)
            if tuple(a.shape) != tuple(shape):
                raise ValueError(f"{name}: produced shape {list(a.shape)}, the header says {list(shape)}")
            f.write(_encoded(a, dtype))
    tmp.replace(path)
    return path.stat().st_size


def save_safetensors(path: Path, tensors: Mapping[str, np.ndarray], dtype: str = "F32",
                     metadata: dict | None = None) -> int:
    """``write_safetensors`` of arrays in memory, every one stored as ``dtype``."""
    return write_safetensors(path, {k: (tuple(a.shape), dtype) for k, a in tensors.items()},
                             tensors.__getitem__, metadata)
