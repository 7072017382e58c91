"""Rename a graph inside a QNN context binary.

ONNX Runtime's QNN EP names each graph after a hash of the model's path
(``QNNExecutionProvider_QNNExecutionProvider_<hash>_<n>_0``) and offers no option to choose it, but
runtimes such as Qualcomm's Genie read meaning from graph names (``prompt_ar32_cl128_2_of_4``: they
sort a variant's graphs by name to find the split order, and parse AR / CL from it where no tensor
says). The binary stores each name as a flatbuffer string (a little-endian u32 length, the bytes, a NUL),
plain and as ``PICKLE/256/<name>``: a name no longer than the old one is written in place with its
length lowered and the freed bytes zeroed, which leaves every offset in the binary as it was.
"""
from __future__ import annotations

import struct

from qnnrt.errors import BuildError

_PREFIXES = (b"", b"PICKLE/256/")


def rename_graph(blob: bytes, old: str, new: str) -> bytes:
    """``blob`` with graph ``old`` renamed ``new`` (not longer than ``old``), every occurrence."""
    if not new or len(new.encode()) > len(old.encode()):
        raise BuildError(f"cannot rename graph {old!r} to {new!r}: the new name must be non-empty and "
                         f"at most {len(old.encode())} bytes (it is written in place)")
    data = bytearray(blob)
    found = 0
    for prefix in _PREFIXES:
        full, repl = prefix + old.encode(), prefix + new.encode()
        at = data.find(full)
        while at >= 4:
            length = struct.unpack_from("<I", data, at - 4)[0]
            if length == len(full) and at + length < len(data) and data[at + length] == 0:
                data[at - 4:at] = struct.pack("<I", len(repl))
                data[at:at + length] = repl + bytes(length - len(repl))
                found += 1
            at = data.find(full, at + 1)
    if not found:
        raise BuildError(f"graph {old!r} is not named in this context binary")
    return bytes(data)


__all__ = ["rename_graph"]
