"""Rename graphs and graph tensors inside a QNN context binary.

ONNX Runtime's QNN EP names each graph after a hash of the model's path
(``QNNExecutionProvider_QNNExecutionProvider_<hash>_<n>_0``) and offers no option to choose it, but
runtimes such as Qualcomm's Genie read meaning from graph names (``prompt_ar32_cl128_2_of_4``: they
sort a variant's graphs by name to find the split order, and parse AR / CL from it where no tensor
says). Likewise a binary of several graphs compiled from one ONNX model (compile.combine_members) has
the later graphs' I/O under aliases, where Genie wants every graph's I/O under the same names.

The binary stores each such name as a flatbuffer string (a little-endian u32 length, the bytes, a NUL);
graph names also as ``PICKLE/256/<name>``. A name no longer than the old one is written in place with
its length lowered and the freed bytes zeroed, which leaves every offset in the binary as it was.
"""
from __future__ import annotations

import struct

from qnnrt.errors import BuildError

GRAPH_PREFIXES = (b"", b"PICKLE/256/")


def _rename(data: bytearray, old: str, new: str, prefixes: tuple[bytes, ...]) -> int:
    if not new or len(new.encode()) > len(old.encode()):
        raise BuildError(f"cannot rename {old!r} to {new!r} in a context binary: the new name must be "
                         f"non-empty and at most {len(old.encode())} bytes (it is written in place)")
    found = 0
    for prefix in prefixes:
        full, repl = prefix + old.encode(), prefix + new.encode()
        at = data.find(full)
        while at >= 4:
            length = struct.unpack_from("<I", data, at - 4)[0]
            if length == len(full) and at + length < len(data) and data[at + length] == 0:
                data[at - 4:at] = struct.pack("<I", len(repl))
                data[at:at + length] = repl + bytes(length - len(repl))
                found += 1
            at = data.find(full, at + 1)
    return found


def rename_in_binary(blob: bytes, graphs: dict[str, str], tensors: dict[str, str] | None = None) -> bytes:
    """``blob`` with graphs and tensors renamed (old -> new, each new name not longer than its old)."""
    data = bytearray(blob)
    for kind, renames, prefixes in (("graph", graphs, GRAPH_PREFIXES), ("tensor", tensors or {}, (b"",))):
        for old, new in renames.items():
            if not _rename(data, old, new, prefixes):
                raise BuildError(f"{kind} {old!r} is not named in this context binary")
    return bytes(data)


def rename_graph(blob: bytes, old: str, new: str) -> bytes:
    """``blob`` with graph ``old`` renamed ``new`` (not longer than ``old``), every occurrence."""
    return rename_in_binary(blob, {old: new})


__all__ = ["rename_graph", "rename_in_binary"]
