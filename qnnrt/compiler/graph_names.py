"""Rename graphs and graph tensors inside a QNN context binary.

ONNX Runtime's QNN EP names each graph after a hash of the model's path
(``QNNExecutionProvider_QNNExecutionProvider_<hash>_<n>_0``) and offers no option to choose it, but
runtimes such as Qualcomm's Genie read meaning from graph names (``prompt_ar32_cl128_2_of_4``: they
sort a variant's graphs by name to find the split order, and parse AR / CL from it where no tensor
says). Likewise a binary of several graphs compiled from one ONNX model (compile.combine_members) has
the later graphs' I/O under aliases, where Genie wants every graph's I/O under the same names.

The binary stores each such name as a flatbuffer string (a little-endian u32 length, the bytes, a NUL);
graph names also as ``PICKLE/<graph id>/<name>``. A name no longer than the old one is written in place with
its length lowered and the freed bytes zeroed, which leaves every offset in the binary as it was.
"""
from __future__ import annotations

import re
import struct

from qnnrt.errors import BuildError

_PICKLE = re.compile(rb"PICKLE/\d+/$")   # the HTP blob's own copy of a graph name: PICKLE/<graph id>/<name>


def _prefix_at(data: bytearray, at: int, prefixed: bool) -> int:
    """Where the string holding a name at ``at`` starts: ``at`` itself, or the start of a
    ``PICKLE/<graph id>/`` before it (-1 if there is none)."""
    if not prefixed:
        return at
    m = _PICKLE.search(bytes(data[max(0, at - 24):at]))
    return at - (len(m.group(0))) if m else -1


SUFFIX = 8      # names are found by their last SUFFIX bytes: one scan per distinct ending, not per name


def _occurrences(data: bytearray, names: list[bytes]) -> dict[bytes, list[int]]:
    """Where each of ``names`` starts in ``data``. The names sharing an ending (compile.combine_members'
    aliases all end ``__qnnrt<j>``) share one scan of the binary: hundreds of names in a binary of
    hundreds of MB took a scan each (~50 s for SmolLM2-135M on a loaded host)."""
    groups: dict[bytes, list[bytes]] = {}
    for n in names:
        groups.setdefault(n[-SUFFIX:], []).append(n)
    out: dict[bytes, list[int]] = {n: [] for n in names}
    for tail, members in groups.items():
        at = data.find(tail)
        while at >= 0:
            end = at + len(tail)
            for n in members:
                if end >= len(n) and data[end - len(n):end] == n:
                    out[n].append(end - len(n))
            at = data.find(tail, at + 1)
    return out


def _rename(data: bytearray, old: str, new: str, prefixed: bool, where: list[int]) -> int:
    if not new or len(new.encode()) > len(old.encode()):
        raise BuildError(f"cannot rename {old!r} to {new!r} in a context binary: the new name must be "
                         f"non-empty and at most {len(old.encode())} bytes (it is written in place)")
    name, repl = old.encode(), new.encode()
    found = 0
    for with_prefix in (False, True) if prefixed else (False,):
        for at in where:
            start = _prefix_at(data, at, with_prefix)
            end = at + len(name)
            if start >= 4 and end < len(data) and data[end] == 0 and data[at:end] == name and \
                    struct.unpack_from("<I", data, start - 4)[0] == end - start:
                data[start - 4:start] = struct.pack("<I", end - start - len(name) + len(repl))
                data[at:end] = repl + bytes(len(name) - len(repl))
                found += 1
    return found


def rename_in_binary(blob: bytes, graphs: dict[str, str], tensors: dict[str, str] | None = None) -> bytes:
    """``blob`` with graphs and tensors renamed (old -> new, each new name not longer than its old)."""
    data = bytearray(blob)
    where = _occurrences(data, [old.encode() for old in {**graphs, **(tensors or {})}])
    for kind, renames, prefixed in (("graph", graphs, True), ("tensor", tensors or {}, False)):
        for old, new in renames.items():
            if not _rename(data, old, new, prefixed, where[old.encode()]):
                raise BuildError(f"{kind} {old!r} is not named in this context binary")
    return bytes(data)


def rename_graph(blob: bytes, old: str, new: str) -> bytes:
    """``blob`` with graph ``old`` renamed ``new`` (not longer than ``old``), every occurrence."""
    return rename_in_binary(blob, {old: new})


__all__ = ["rename_graph", "rename_in_binary"]
