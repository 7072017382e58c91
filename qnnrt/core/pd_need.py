"""A context's PD (protection domain) need, predicted from its binary alone: no context is created.

QNN HTP reserves, per context, the SUM over its graphs of (QNN 2.51, x86 simulator: 597/597 binaries
byte-exact, every part; see docs/design.md "PD need"):

  non_shared_weights = round_up(V2.constSize, 2 MiB)                 graph blob info V2
  io                 = V2.ioTensorSize                               graph blob info V2
  runlist            = V2.opDataSize + V2.ddrTensorSize + Mm[5]*256  blob info V2 + pickle record "Mm"
  spill_fill         = V1.spillFillBufferSize                        graph blob info V1
  vtcm               = Sz[1]*256                                     pickle record "Sz"

The blob info is documented (QnnHtpSystemContext.h, graph info v3). The pickle records ("Sz", "Mm")
are reverse-engineered: they are the header of each graph's HTP pickle inside the context blob.
V1.vtcmSize is not the VTCM QNN reserves (default builds say 4 MiB and are prepared for 8 MiB).
A part that cannot be read is None, with a note saying why; the total is then None, never a guess.
"""
from __future__ import annotations

import ctypes as C
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from qnnrt._capi import types as T

if TYPE_CHECKING:
    from qnnrt.core.binary import GraphSpec

PARTS = ("non_shared_weights", "io", "runlist", "spill_fill", "vtcm")
WEIGHT_GRANULE = 2 << 20
RECORD_UNIT = 256  # Sz / Mm words count 256-byte units


@dataclass(frozen=True)
class GraphBlobInfo:
    """The PD-relevant facts QNN's binary info gives for one graph (None where absent)."""
    name: str
    graph_info_version: int
    blob_info_size: int = 0
    v1: dict[str, int] | None = None
    v2: dict[str, int] | None = None


@dataclass(frozen=True)
class PickleHeader:
    """The records of one HTP pickle header: "Sz" and "Mm" words (reverse-engineered)."""
    offset: int
    sz: tuple[int, ...]
    mm: tuple[int, ...]


@dataclass(frozen=True)
class GraphPdNeed:
    name: str
    parts: dict[str, int | None]
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> int | None:
        vals = [self.parts.get(p) for p in PARTS]
        return None if any(v is None for v in vals) else sum(vals)  # type: ignore[arg-type]

    def to_dict(self) -> dict:
        return {"name": self.name, "parts": dict(self.parts), "total_bytes": self.total,
                "notes": list(self.notes)}


@dataclass(frozen=True)
class PdNeed:
    """Predicted PD reservation of one context: per graph parts; the context reserves their sum."""
    graphs: tuple[GraphPdNeed, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def total(self) -> int | None:
        totals = [g.total for g in self.graphs]
        return None if not totals or any(t is None for t in totals) else sum(totals)  # type: ignore[arg-type]

    @property
    def largest_graph(self) -> int | None:
        totals = [g.total for g in self.graphs]
        return None if not totals or any(t is None for t in totals) else max(totals)  # type: ignore[type-var]

    @property
    def parts(self) -> dict[str, int | None]:
        """Each part summed over the graphs (None where any graph's part is unknown)."""
        out: dict[str, int | None] = {}
        for p in PARTS:
            vals = [g.parts.get(p) for g in self.graphs]
            out[p] = None if not vals or any(v is None for v in vals) else sum(vals)  # type: ignore[arg-type]
        return out

    @property
    def exact(self) -> bool:
        return self.total is not None

    def to_dict(self) -> dict:
        return {"predicted_bytes": self.total, "parts": self.parts,
                "largest_graph_bytes": self.largest_graph,
                "graphs": [g.to_dict() for g in self.graphs], "notes": list(self.notes)}


def _names(struct: type[C.Structure]) -> list[str]:
    return [f[0] for f in struct._fields_ if f[0] != "version"]


def blob_infos(graphs: Sequence[GraphSpec]) -> list[GraphBlobInfo]:
    """Each graph's blob info as `ContextBinary` parsed it (core/binary.parse_graph_blob_info)."""
    out = []
    for g in graphs:
        b = g.blob_info
        if not b:
            out.append(GraphBlobInfo(g.name, g.info_version))
            continue
        v1 = ({"version": 1, **{k: b[k] for k in _names(T.HtpGraphBlobInfoV1)}}
              if b.get("version") == 1 and all(k in b for k in _names(T.HtpGraphBlobInfoV1)) else None)
        v2 = ({"version": 2, **{k: b[k] for k in _names(T.HtpGraphBlobInfoV2)}}
              if b.get("v2_version") == 2 else None)
        out.append(GraphBlobInfo(g.name, g.info_version, int(b.get("size", 0)), v1, v2))
    return out


def _record_word(length: int, tag: bytes) -> int:
    return length | (tag[0] << 16) | (tag[1] << 24)


def pickle_headers(buffer: np.ndarray) -> list[PickleHeader]:
    """Header records of every HTP pickle in a context binary (reverse-engineered, QNN 2.4x-2.51).

    A header is a run of 4-byte aligned records [u16 length in u32 words incl. this one][2-char tag]
    [payload]: "Sz" (word 1: VTCM bytes / 256), "Vr", "Op", "Mm" (13 words, 256-byte units: [0] op
    data, [3] const, [5] runlist beyond op data and DDR tensors, [6] graph I/O), "Zz" (end). Only
    headers with both Sz and Mm are returned. The scan reads the mapping in place (no copy)."""
    n = buffer.nbytes // 4
    if n == 0:
        return []
    words = buffer[:n * 4].view("<u4")
    starts = np.flatnonzero((words == _record_word(7, b"Sz")) | (words == _record_word(5, b"Sz")))
    out = []
    for s in starts.tolist():
        rec: dict[str, tuple[int, ...]] = {}
        j = s
        for _ in range(8):
            if j >= n:
                break
            w = int(words[j])
            ln, tag = w & 0xFFFF, bytes([(w >> 16) & 0xFF, w >> 24])
            if ln == 0 or j + ln > n or tag == b"Zz":
                break
            if tag in (b"Sz", b"Mm"):
                rec[tag.decode()] = tuple(int(x) for x in words[j + 1:j + ln])
            j += ln
        if "Sz" in rec and "Mm" in rec and len(rec["Sz"]) >= 2:
            out.append(PickleHeader(s * 4, rec["Sz"], rec["Mm"]))
    return out


def _round_up(x: int, g: int) -> int:
    return -(-x // g) * g


def need_from_blob_info(graphs: list[GraphBlobInfo], headers: list[PickleHeader]) -> PdNeed:
    """The prediction from blob infos and pickle headers (pure: unit-testable without QNN)."""
    filled = [h for h in headers if len(h.mm) >= 7 and any(h.mm)]  # barrel copies carry Mm all 0
    out, notes = [], []
    for g in graphs:
        parts: dict[str, int | None] = dict.fromkeys(PARTS)
        gnotes: list[str] = []
        v1, v2 = g.v1, g.v2
        if v1 is None and v2 is None:
            gnotes.append(f"graph {g.name!r}: the binary info (graph info v{g.graph_info_version}"
                          + (f", blob info of {g.blob_info_size} B" if g.blob_info_size else ", no blob info")
                          + ") carries no HTP graph blob info: every part is unknown "
                          "(QNN reports it at creation)")
        if v1 is not None:
            parts["spill_fill"] = v1["spillFillBufferSize"]
        if v2 is None:
            if v1 is not None:
                gnotes.append(f"graph {g.name!r}: blob info has no V2 part (QNN older than 2.4x?): "
                              "weights, I/O, runlist and VTCM are unknown")
        else:
            parts["non_shared_weights"] = _round_up(v2["constSize"], WEIGHT_GRANULE)
            parts["io"] = v2["ioTensorSize"]
            want = (v2["opDataSize"], v2["constSize"], v2["ioTensorSize"])
            hits = [h for h in filled
                    if (h.mm[0] * RECORD_UNIT, h.mm[3] * RECORD_UNIT, h.mm[6] * RECORD_UNIT) == want]
            if not hits:
                gnotes.append(f"graph {g.name!r}: no HTP pickle header matches its blob info: runlist "
                              "and VTCM are unknown")
            else:
                extra = max(h.mm[5] for h in hits) * RECORD_UNIT
                parts["runlist"] = v2["opDataSize"] + v2["ddrTensorSize"] + extra
                parts["vtcm"] = max(h.sz[1] for h in hits) * RECORD_UNIT
                if len({(h.mm, h.sz[1]) for h in hits}) > 1:
                    gnotes.append(f"graph {g.name!r}: {len(hits)} pickle headers match with different "
                                  "records: runlist and VTCM are the largest (an upper bound)")
            if v2.get("sharedWeightsSize"):
                gnotes.append(f"graph {g.name!r}: {v2['sharedWeightsSize']} B of shared weights are not "
                              "in this context's need (reserved once for the sharing contexts)")
        out.append(GraphPdNeed(g.name, parts, tuple(gnotes)))
        notes.extend(gnotes)
    if not graphs:
        notes.append("the binary info lists no graphs")
    return PdNeed(tuple(out), tuple(notes))


def predict_pd_need(graphs: Sequence[GraphSpec], buffer: np.ndarray) -> PdNeed:
    """Predicted PD reservation of the context whose binary info gave `graphs` and whose bytes are
    `buffer` (uint8 array); no context is created."""
    return need_from_blob_info(blob_infos(graphs), pickle_headers(buffer))
