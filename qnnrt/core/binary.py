"""ContextBinary: a QNN context binary mapped from disk (never copied into Python bytes), with the
binary info the system interface reads from it."""
from __future__ import annotations

import ctypes as C
import errno
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from qnnrt._capi import codes
from qnnrt._capi import types as T
from qnnrt._capi.library import QnnLibrary, open_library
from qnnrt.core import load_cache
from qnnrt.core.freeing import check_free
from qnnrt.core.load_cache import FileIdentity, Origin
from qnnrt.core.tensor import TensorSpec, spec_from_struct
from qnnrt.errors import FormatError, QnnrtError

if TYPE_CHECKING:
    from qnnrt.core.pd_need import PdNeed

MIN_BINARY_SIZE = 64  # nothing smaller can hold a QNN context binary header


def parse_graph_blob_info(raw: bytes) -> dict:
    """The HTP graph blob info of a v3 graph info: every field of the version-1 struct and, when
    the blob holds one (size >= 112 and its own version word 2 at offset 40), of the V2 struct
    (`v2_version`, ..., `sharedWeightsSize`). `size` is the blob's length; unknown layouts give
    just what could be read safely."""
    out: dict = {"size": len(raw)}
    v1 = T.HTP_BLOB_INFO_V1_SIZE
    if len(raw) < 4:
        return out
    out["version"] = int.from_bytes(raw[:4], "little")
    if out["version"] != 1 or len(raw) < v1:
        return out
    a = T.HtpGraphBlobInfoV1.from_buffer_copy(raw[:v1])
    out.update({f[0]: int(getattr(a, f[0])) for f in a._fields_ if f[0] != "version"})
    v2 = T.HTP_BLOB_INFO_V2_SIZE
    if len(raw) >= v1 + v2 and int.from_bytes(raw[v1:v1 + 4], "little") == 2:
        b = T.HtpGraphBlobInfoV2.from_buffer_copy(raw[v1:v1 + v2])
        out["v2_version"] = 2
        out.update({f[0]: int(getattr(b, f[0])) for f in b._fields_ if f[0] != "version"})
    return out


@dataclass(frozen=True)
class GraphSpec:
    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    blob_info: dict | None = field(default=None, compare=False)  # parse_graph_blob_info (v3 info)
    info_version: int = field(default=1, compare=False)          # QnnSystemContext graph info version

    @property
    def shared_weights_size(self) -> int:
        """Bytes of HTP shared weights this graph uses (0: none, or not recorded)."""
        return int((self.blob_info or {}).get("sharedWeightsSize", 0))

    @property
    def spill_fill_size(self) -> int:
        """Bytes of spill-fill buffer this graph needs (graph blob info v1; 0 where not recorded):
        a spill-fill group shares one buffer of the largest of its graphs' sizes."""
        return int((self.blob_info or {}).get("spillFillBufferSize", 0))

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"name": self.name, "inputs": [t.to_dict() for t in self.inputs],
             "outputs": [t.to_dict() for t in self.outputs]}
        if self.blob_info is not None:
            d["blob_info"] = dict(self.blob_info)
        return d


@dataclass(frozen=True)
class BinaryInfo:
    info_version: int
    backend_id: int
    build_id: str
    core_api: str
    backend_api: str
    soc_version: str
    soc_model: int | None
    context_blob_size: int
    graphs: tuple[GraphSpec, ...] = field(default=())

    @property
    def weight_sharing(self) -> bool:
        """Compiled with HTP weight sharing (some graph records shared weights)."""
        return any(g.shared_weights_size > 0 for g in self.graphs)

    def to_dict(self) -> dict:
        return {"info_version": self.info_version, "backend_id": self.backend_id,
                "build_id": self.build_id, "core_api": self.core_api,
                "backend_api": self.backend_api, "soc_version": self.soc_version,
                "soc_model": self.soc_model, "context_blob_size": self.context_blob_size,
                "weight_sharing": self.weight_sharing,
                "graphs": [g.to_dict() for g in self.graphs]}


def read_binary_info(lib: QnnLibrary, buffer: np.ndarray, where: str) -> BinaryInfo:
    """Binary info of a context binary held in `buffer` (uint8 array), copied out of QNN memory."""
    if buffer.nbytes < MIN_BINARY_SIZE:
        raise FormatError(f"{where}: {buffer.nbytes} bytes is too small to be a QNN context binary")
    sysctx = C.c_void_p()
    rc = lib.sys.systemContextCreate(C.byref(sysctx))
    if rc:
        raise FormatError(f"{where}: systemContextCreate failed ({codes.error_name(codes.code_of(rc))})")
    try:
        info_p = C.POINTER(T.BinaryInfo)()
        size = C.c_uint64()
        rc = lib.sys.systemContextGetBinaryInfo(sysctx, C.c_void_p(buffer.ctypes.data),
                                                buffer.nbytes, C.byref(info_p), C.byref(size))
        if rc or not info_p:
            raise FormatError(
                f"{where}: not a readable QNN context binary (QNN's system interface rejected it "
                f"with {codes.error_name(codes.code_of(rc))}). The file may be truncated, corrupt, "
                f"or not a context binary; rebuild it or check the path.")
        bi = info_p.contents
        if bi.version not in (1, 2, 3):
            raise FormatError(f"{where}: unknown binary info version {bi.version}")
        b = bi.body
        graphs = []
        for i in range(b.numGraphs):
            g = b.graphs[i]
            if g.version not in (1, 2, 3):
                raise FormatError(f"{where}: unknown graph info version {g.version}")
            gb = g.body
            blob = None
            if g.version == 3 and g.graphInfoV3.graphBlobInfo and g.graphInfoV3.graphBlobInfoSize:
                blob = parse_graph_blob_info(C.string_at(g.graphInfoV3.graphBlobInfo,
                                                         g.graphInfoV3.graphBlobInfoSize))
            graphs.append(GraphSpec(
                name=(gb.graphName or b"").decode(errors="replace"),
                inputs=tuple(spec_from_struct(gb.graphInputs[j]) for j in range(gb.numGraphInputs)),
                outputs=tuple(spec_from_struct(gb.graphOutputs[j])
                              for j in range(gb.numGraphOutputs)),
                blob_info=blob, info_version=int(g.version)))
        return BinaryInfo(
            info_version=bi.version, backend_id=b.backendId,
            build_id=(b.buildId or b"").decode(errors="replace"),
            core_api=str(b.coreApiVersion), backend_api=str(b.backendApiVersion),
            soc_version=(b.socVersion or b"").decode(errors="replace"),
            soc_model=int(b.socModel) if bi.version == 3 else None,
            context_blob_size=int(b.contextBlobSize), graphs=tuple(graphs))
    finally:
        check_free(lib.sys.systemContextFree(sysctx), "systemContextFree", f"the system context reading {where}")


def _map_file(path: Path) -> tuple[mmap.mmap, FileIdentity | None]:
    """The file mapped, and its identity as mapped (the load cache's key)."""
    with open(path, "rb") as f:  # the map keeps its own descriptor: one fd per binary
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), FileIdentity.of(path, f.fileno())


def _raise_fd_limit() -> bool:
    """Raise the soft open-files limit to the hard one (programs of thousands of binaries)."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY:
            hard = 1 << 20
        if soft >= hard:
            return False
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return True
    except (ImportError, OSError, ValueError):
        return False


class ContextBinary:
    """A context binary: a file mapped read-only, or a slice of a bigger mapped file (e.g. a .pte).

    The bytes are never copied into Python; `buffer` is a uint8 numpy view over the mapping, whose
    address goes to QNN. `info` is read once, lazily. `origin` (a mapped file's own; given for a
    slice) is where the bytes lie on disk: what they hash to and their PD-need headers are then
    read from the load cache while the file is unchanged (core/load_cache.py).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 buffer: np.ndarray | memoryview | bytes | bytearray | None = None, name: str | None = None,
                 lib: QnnLibrary | None = None, backend_lib: str | None = None,
                 origin: Origin | None = None):
        self._mmap: mmap.mmap | None = None
        self.origin: Origin | None = None
        self.path: Path | None
        if (path is None) == (buffer is None):
            raise ValueError("give exactly one of path or buffer")
        if path is not None:
            self.path = Path(path)
            self.name = name or self.path.name
            self._open_file()
        elif buffer is not None:
            self.path = None
            self.name = name or "<buffer>"
            self.buffer = np.frombuffer(buffer, dtype=np.uint8)
            if origin is not None and origin.length == self.buffer.nbytes:
                self.origin = origin
        self._lib = lib
        self._backend_lib = backend_lib
        self._info: BinaryInfo | None = None
        self._sha256: str | None = None

    def _open_file(self) -> None:
        p = self.path
        if p is None:
            raise QnnrtError(f"{self.name}: this context binary was given as a buffer; it has no file to map")
        if not p.exists():
            raise FormatError(f"{p}: no such file. Check the path (a context binary is usually a "
                              f".bin file written by qnnrt build, ORT's QNN EP or qnn-context-binary-generator).")
        if p.is_dir():
            raise FormatError(f"{p}: is a directory, not a context binary")
        size = p.stat().st_size
        if size == 0:
            raise FormatError(f"{p}: file is empty; it is not a QNN context binary")
        identity = None
        try:
            self._mmap, identity = _map_file(p)
        except OSError as e:
            if e.errno == errno.EMFILE and _raise_fd_limit():
                try:
                    self._mmap, identity = _map_file(p)
                except OSError as e2:
                    e = e2
            if self._mmap is None:
                hint = (" (too many open files: raise `ulimit -n`; a program keeps one descriptor "
                        "per context binary)" if e.errno == errno.EMFILE else "")
                raise FormatError(f"{p}: cannot map file: {e}{hint}") from e
        self.buffer = np.frombuffer(self._mmap, dtype=np.uint8)
        if identity is not None and identity.size == self.buffer.nbytes:
            self.origin = Origin(identity, 0, identity.size)

    @property
    def size(self) -> int:
        return int(self.buffer.nbytes)

    @property
    def address(self) -> int:
        return int(self.buffer.ctypes.data)

    @property
    def where(self) -> str:
        return str(self.path) if self.path else self.name

    @property
    def lib(self) -> QnnLibrary:
        """The QNN libraries this binary is read with (opened on first use)."""
        if self._lib is None:
            self._lib = open_library(self._backend_lib)
        return self._lib

    @property
    def info(self) -> BinaryInfo:
        if self._info is None:
            self._info = read_binary_info(self.lib, self.buffer, self.where)
        return self._info

    @property
    def graphs(self) -> tuple[GraphSpec, ...]:
        return self.info.graphs

    def sha256(self, fresh: bool = False) -> str:
        """Hex sha256 of the bytes: hashed once per object, and not at all while the load cache
        holds it for an unchanged file. ``fresh``: hash the bytes again (and rewrite the cache
        entry), for a value that did not match."""
        if self._sha256 is None or fresh:
            from qnnrt.fileio import buffer_sha256
            self._sha256 = load_cache.sha256(self.origin, lambda: buffer_sha256(self.buffer), fresh)
        return self._sha256

    def pd_need(self) -> PdNeed:
        """Predicted PD reservation of this context, per graph and part (core/pd_need.py), read from
        the binary alone: no context is created. Unknown parts are None, with notes. The byte scan
        for pickle headers comes from the load cache while the file is unchanged."""
        need: PdNeed | None = getattr(self, "_pd_need", None)
        if need is None:
            from qnnrt.core.pd_need import blob_infos, need_from_blob_info, pickle_headers
            graphs = blob_infos(self.graphs)   # the binary info first: a bad binary fails before the scan
            headers = load_cache.pickle_headers(self.origin, lambda: pickle_headers(self.buffer))
            need = need_from_blob_info(graphs, headers)
            self._pd_need = need
        return need

    def graph(self, name: str) -> GraphSpec:
        for g in self.info.graphs:
            if g.name == name:
                return g
        raise FormatError(f"{self.where}: no graph named {name!r}; graphs in this binary: "
                          f"{', '.join(g.name for g in self.info.graphs) or '(none)'}")

    def close(self) -> None:
        """Drop the mapping. Contexts already created from it are unaffected (QNN copied what it
        needs); creating new ones needs a new ContextBinary."""
        self.buffer = np.zeros(0, np.uint8)
        self.origin = None   # the bytes are gone: nothing to look up for them
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:  # a view is still exported; the map goes with the last reference
                pass
            self._mmap = None

    def __enter__(self) -> "ContextBinary":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ContextBinary({self.where!r}, {self.size} bytes)"
