"""ONNX initializers as external data in one file, written as they are made and stored once per
content: a model's weights then never sit in Python (nor in a serialized model) as a whole, and the
graphs of one compile unit that hold the same weights (a part's prompt and token graphs) point at
the same bytes, which ONNX Runtime reads once from the file instead of each graph's copy.

A model using it is compiled from a file in the same folder as the data file (ONNX locations are
relative to the model's folder): compile.compile_unit(..., data_dir=).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

ALIGN = 4096          # each tensor starts on a page (ONNX Runtime can map it in place)
SMALLEST = 1024       # bytes; smaller tensors stay in the model (shapes, scalars)


class ExternalWeights:
    """An append-only data file of tensors, each stored once whatever how many initializers hold it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_bytes(b"")
        self.size = 0
        self._at: dict[bytes, tuple[int, int]] = {}     # content digest -> (offset, length)

    def tensor(self, name: str, array: np.ndarray) -> TensorProto:
        """An initializer ``name`` holding ``array``: in the model when small, else in the data file."""
        array = np.ascontiguousarray(array)
        if array.nbytes < SMALLEST:
            from onnx import numpy_helper
            return numpy_helper.from_array(array, name)
        data = array.tobytes()
        digest = hashlib.blake2b(data, digest_size=20).digest()
        where = self._at.get(digest)
        if where is None:
            offset = -(-self.size // ALIGN) * ALIGN
            with open(self.path, "r+b") as f:
                f.seek(offset)
                f.write(data)
            where = self._at[digest] = (offset, len(data))
            self.size = offset + len(data)
        t = TensorProto()
        t.name = name
        t.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        t.dims.extend(array.shape)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.path.name), ("offset", str(where[0])), ("length", str(where[1]))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        return t


def external_files(model) -> set[str]:
    """The data files (locations relative to the model's folder) ``model``'s initializers name."""
    return {e.value for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL
            for e in t.external_data if e.key == "location"}


__all__ = ["ExternalWeights", "external_files"]
