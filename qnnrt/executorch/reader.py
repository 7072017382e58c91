"""Read ExecuTorch ``.pte`` programs (no torch, no executorch needed).

A ``.pte`` file is a flatbuffer ``Program`` (file identifier ``ET12``), optionally followed by data
segments. Layout facts used here (all little-endian), from ExecuTorch's public sources
(``schema/program.fbs``, ``schema/scalar_type.fbs``, ``exir/_serialize/_program.py``,
``runtime/executor/program.cpp``) and checked against files written by ExecuTorch 1.5.1:

* bytes 0..4: flatbuffer root-table offset; bytes 4..8: the file identifier ``ET12``.
* bytes 8..: the optional *extended header*: magic ``eh00``, uint32 header length (32 today; at
  least 24), uint64 program size (size of the flatbuffer part, header included), uint64 segment base
  offset (absolute file offset of the first segment, 0 when there are none), uint64 segment data size
  (present when the header length is > 24).
* ``Program.segments[i]`` = (offset relative to the segment base offset, size).
* Delegate data: ``BackendDelegate.processed`` is (INLINE -> ``Program.backend_delegate_data[i]``,
  SEGMENT -> ``Program.segments[i]``). ExecuTorch's serializer moves inline delegate data into segments
  and de-duplicates identical blobs, so two methods whose delegates hold the same bytes point at the
  same segment.
* Constant tensors: ``data_buffer_idx`` > 0 and no allocation info. Data is in
  ``constant_segment.offsets[idx]`` inside segment ``constant_segment.segment_index`` when that list is
  non-empty, else in the deprecated inline ``constant_buffer[idx].storage``.

QNN delegates (backend id ``QnnBackend``) carry a context binary wrapped in ExecuTorch's
``QnnContextCustomProtocol`` header: uint32 magic ``0x5678ABCD``, int64 signature, uint64 context-binary
size, zero padding up to 256 bytes (ExecuTorch >= 1.2; 1.0/1.1 had no padding, the binary followed at
byte 20), then the context binary. See :func:`unwrap_qnn_delegate`.

Everything is read through one read-only memory map: context binaries and constant tensors are
returned as ``memoryview`` / numpy views of the map, never copied.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from qnnrt.errors import FormatError
from qnnrt.executorch import schema as S
from qnnrt.executorch import compile_spec as _compile_spec

__all__ = [
    "QNN_BACKEND_ID", "SCALAR_TYPE_NAMES", "scalar_type_to_numpy", "ExtendedHeader", "TensorInfo",
    "PteValue", "KernelCall", "DelegateCall", "MoveCall", "JumpFalseCall", "FreeCall", "PteOperator",
    "PteIOSpec", "PteDelegate", "PteChain", "PteMethod", "PteProgram", "QnnDelegateBlob", "read_pte",
    "unwrap_qnn_delegate", "qnn_context_binary", "qnn_graph_io_order", "parse_qnn_compile_spec",
    "is_pte_file", "numpy_to_scalar_type",
]

QNN_BACKEND_ID = "QnnBackend"

_EH_MAGIC = b"eh00"
_EH_MIN_LEN = 24          # magic + length + program size + segment base offset
_QNN_MAGIC = 0x5678ABCD   # QnnContextCustomProtocol
_QNN_QCIR_MAGIC = 0x1234ABCD  # QnnQcirCustomProtocol (removed in ExecuTorch 1.0)
_QNN_HEADER_FIELDS = 20   # magic (4) + signature (8) + binary size (8)
_QNN_HEADER_PADDED = 256  # QNN_CTX_BIN_ALIGNMENT: header padded to 256 bytes since ExecuTorch 1.2

# ExecuTorch ScalarType numbers (schema/scalar_type.fbs)
SCALAR_TYPE_NAMES = {
    0: "BYTE", 1: "CHAR", 2: "SHORT", 3: "INT", 4: "LONG", 5: "HALF", 6: "FLOAT", 7: "DOUBLE",
    11: "BOOL", 12: "QINT8", 13: "QUINT8", 14: "QINT32", 15: "BFLOAT16", 16: "QUINT4X2",
    17: "QUINT2X4", 22: "BITS16", 23: "FLOAT8E5M2", 24: "FLOAT8E4M3FN", 25: "FLOAT8E5M2FNUZ",
    26: "FLOAT8E4M3FNUZ", 27: "UINT16", 28: "UINT32", 29: "UINT64",
}
_SCALAR_TO_NP = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.float16,
                 6: np.float32, 7: np.float64, 11: np.bool_, 22: np.uint16, 27: np.uint16,
                 28: np.uint32, 29: np.uint64}
try:  # optional: bfloat16 / float8 through ml_dtypes when it is installed
    import ml_dtypes as _mld
    _SCALAR_TO_NP.update({15: _mld.bfloat16, 23: _mld.float8_e5m2, 24: _mld.float8_e4m3fn,
                          25: _mld.float8_e5m2fnuz, 26: _mld.float8_e4m3fnuz})
except Exception:  # pragma: no cover - ml_dtypes missing
    pass


def scalar_type_to_numpy(scalar_type: int) -> np.dtype | None:
    """numpy dtype of an ExecuTorch ScalarType number, None when numpy has no equivalent."""
    t = _SCALAR_TO_NP.get(int(scalar_type))
    return None if t is None else np.dtype(t)


def numpy_to_scalar_type(dtype) -> int:
    """ExecuTorch ScalarType number of a numpy dtype (inverse of :func:`scalar_type_to_numpy`)."""
    dt = np.dtype(dtype)
    for k, v in _SCALAR_TO_NP.items():
        if k != 22 and np.dtype(v) == dt:
            return k
    raise FormatError(f"numpy dtype {dt} has no ExecuTorch ScalarType")


# ---------------------------------------------------------------------------------------------
# data model
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExtendedHeader:
    """ExecuTorch's extended file header ("eh00") found at byte 8."""
    length: int
    program_size: int
    segment_base_offset: int
    segment_data_size: int


@dataclass(frozen=True)
class TensorInfo:
    """Static description of a Tensor value."""
    scalar_type: int
    shape: tuple[int, ...]
    dim_order: tuple[int, ...]
    data_buffer_idx: int = 0
    allocation: tuple[int, int] | None = None     # (memory_id, offset) when memory-planned
    shape_dynamism: int = 0                       # 0 STATIC, 1 DYNAMIC_BOUND, 2 DYNAMIC_UNBOUND
    fully_qualified_name: str | None = None
    external: bool = False                        # data lives outside the .pte (a .ptd file)
    mutable_segment_idx: int = 0

    @property
    def dtype(self) -> np.dtype | None:
        return scalar_type_to_numpy(self.scalar_type)

    @property
    def scalar_type_name(self) -> str:
        return SCALAR_TYPE_NAMES.get(self.scalar_type, f"scalar_type_{self.scalar_type}")

    @property
    def is_constant(self) -> bool:
        """Constant data stored in the program (weights)."""
        return self.data_buffer_idx > 0 and self.allocation is None

    @property
    def has_initial_data(self) -> bool:
        return self.data_buffer_idx > 0

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= int(s)
        return n

    @property
    def nbytes(self) -> int:
        dt = self.dtype
        return self.numel * (dt.itemsize if dt is not None else 1)

    @property
    def is_contiguous_order(self) -> bool:
        return self.dim_order == tuple(range(len(self.dim_order)))

    def describe(self) -> str:
        dt = self.dtype
        return f"{dt.name if dt is not None else self.scalar_type_name}{list(self.shape)}"


@dataclass(frozen=True)
class PteValue:
    """One entry of an execution plan's ``values`` table.

    kind: "null", "int", "bool", "double", "string", "tensor", "int_list", "double_list",
    "bool_list", "tensor_list", "optional_tensor_list" (or "none" for an empty EValue).
    value: None, int, bool, float, str, TensorInfo, tuple[float, ...] (double_list), tuple[bool, ...]
    (bool_list), or a tuple of *value indices* for int_list, tensor_list and optional_tensor_list (-1
    meaning None in an optional list). ExecuTorch boxes int lists: each item is the index of an Int
    value, so symbolic sizes can change at run time (runtime/executor/method.cpp).
    """
    kind: str
    value: Any = None


@dataclass(frozen=True)
class KernelCall:
    op_index: int
    args: tuple[int, ...]


@dataclass(frozen=True)
class DelegateCall:
    delegate_index: int
    args: tuple[int, ...]


@dataclass(frozen=True)
class MoveCall:
    move_from: int
    move_to: int


@dataclass(frozen=True)
class JumpFalseCall:
    cond_value_index: int
    destination_instruction: int


@dataclass(frozen=True)
class FreeCall:
    value_index: int


Instruction = KernelCall | DelegateCall | MoveCall | JumpFalseCall | FreeCall


@dataclass(frozen=True)
class PteOperator:
    name: str          # e.g. "aten::mm"
    overload: str      # e.g. "out" ("" for the default overload)

    @property
    def qualified_name(self) -> str:
        """The registry key: ``aten::mm.out``."""
        return f"{self.name}.{self.overload}" if self.overload else self.name


@dataclass(frozen=True)
class PteIOSpec:
    """A method input or output."""
    name: str                   # input_0, output_1, ...
    value_index: int
    kind: str                   # PteValue.kind
    shape: tuple[int, ...] | None = None
    dtype: np.dtype | None = None
    scalar_type: int | None = None
    tensor: TensorInfo | None = None


@dataclass(eq=False)
class PteDelegate:
    """One entry of an execution plan's ``delegates`` table, resolved to its bytes in the file."""
    index: int                       # position in the method's delegates table
    backend_id: str                  # "QnnBackend" for QNN
    location: str                    # "INLINE" or "SEGMENT"
    data_index: int                  # index into backend_delegate_data or segments
    file_offset: int                 # absolute offset of the processed blob in the file
    size: int                        # size of the processed blob in bytes
    blob: memoryview                 # the processed blob (a view of the memory map)
    compile_specs: dict[str, bytes] = field(default_factory=dict)
    method: str = ""

    @property
    def key(self) -> tuple[str, int]:
        """Stable identity of the blob: equal for every delegate (in any method) that shares it.

        Create one QNN context per key. ("segment", i) or ("inline", i).
        """
        return (self.location.lower(), self.data_index)

    @property
    def is_qnn(self) -> bool:
        return self.backend_id == QNN_BACKEND_ID


@dataclass
class PteChain:
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    instructions: list


@dataclass(eq=False)
class PteMethod:
    """One execution plan."""
    name: str
    values: list[PteValue]
    inputs: list[PteIOSpec]
    outputs: list[PteIOSpec]
    chains: list[PteChain]
    operators: list[PteOperator]
    delegates: list[PteDelegate]
    non_const_buffer_sizes: tuple[int, ...]
    program: "PteProgram | None" = field(default=None, repr=False)
    input_container_spec: str | None = field(default=None, repr=False)
    output_container_spec: str | None = field(default=None, repr=False)

    @property
    def instructions(self) -> list:
        """The instructions of all chains, in execution order (ExecuTorch programs have one chain)."""
        if len(self.chains) == 1:
            return self.chains[0].instructions
        out = []
        for c in self.chains:
            out.extend(c.instructions)
        return out

    @property
    def operator_names(self) -> list[str]:
        return [op.qualified_name for op in self.operators]

    def used_operator_names(self) -> list[str]:
        """Qualified names of operators that KernelCalls actually use, in first-use order."""
        seen: dict[str, None] = {}
        for ins in self.instructions:
            if isinstance(ins, KernelCall):
                seen.setdefault(self.operators[ins.op_index].qualified_name, None)
        return list(seen)

    def delegate_call_order(self) -> list[int]:
        return [i.delegate_index for i in self.instructions if isinstance(i, DelegateCall)]

    def graph_name(self, delegate_index: int) -> str:
        """Name of the QNN graph a DelegateCall runs.

        ExecuTorch's QNN backend executes the graph named after the *method* (``forward``,
        ``prefill``, ...) in the context of the delegate, whatever the delegate index.
        """
        return self.name

    def constant(self, value_index: int) -> np.ndarray:
        """Read-only numpy view of a constant tensor's data (no copy)."""
        if self.program is None:
            raise FormatError(f"method {self.name!r} is detached from its program")
        return self.program.tensor_data(self.values[value_index], where=f"{self.name}.values[{value_index}]")

    def total_delegate_bytes(self) -> int:
        return sum(d.size for d in self.delegates)


@dataclass(frozen=True)
class QnnDelegateBlob:
    """What :func:`unwrap_qnn_delegate` found in a QNN delegate's processed data."""
    binary: memoryview           # the QNN context binary itself
    wrapper: str                 # "QnnContextCustomProtocol" or "none"
    header_size: int             # bytes before the binary (256, 20 or 0)
    signature: int | None        # the wrapper's signature (ExecuTorch uses it to share handles)
    declared_size: int | None    # binary size written in the wrapper
    description: str             # one sentence for logs / inspect


class PteProgram:
    """An opened ``.pte`` file. Keep it open while any view (delegate blob, constant) is used.

    Use as a context manager or call :meth:`close`. Closing while views are still referenced leaves
    the mapping to be released when the last view goes away.
    """

    def __init__(self, path: str, mm, file_size: int, header: ExtendedHeader | None,
                 program_size: int, version: int):
        self.path = path
        self._mm = mm
        self.file_size = file_size
        self.header = header
        self.program_size = program_size
        self.version = version
        self.methods: dict[str, PteMethod] = {}
        self.segments: list[tuple[int, int]] = []          # (absolute offset, size)
        self.inline_delegate_data: list[tuple[int, int]] = []  # (absolute offset, size)
        self.constant_buffer: list[tuple[int, int]] = []   # inline constant buffers (deprecated)
        self.constant_segment: tuple[int, tuple[int, ...]] | None = None   # (segment idx, offsets)
        self.mutable_data_segments: list[tuple[int, tuple[int, ...]]] = []
        self.named_data: dict[str, int] = {}              # key -> segment index

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # views still alive; the mapping is released when they are collected

    def __enter__(self) -> "PteProgram":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def buffer(self):
        if self._mm is None:
            raise FormatError(f"{self.path}: the program was closed; open it again with read_pte()")
        return self._mm

    # -- data -------------------------------------------------------------------------------
    def view(self, offset: int, size: int) -> memoryview:
        """A zero-copy view of ``size`` bytes at absolute file ``offset``."""
        if offset < 0 or size < 0 or offset + size > self.file_size:
            raise FormatError(f"{self.path}: bytes {offset}..{offset + size} lie outside the file "
                              f"({self.file_size} bytes). The file is truncated; copy or re-export it.")
        return memoryview(self.buffer)[offset:offset + size]

    @property
    def delegates(self) -> list[PteDelegate]:
        """Every delegate of every method (method order, then delegate order)."""
        return [d for m in self.methods.values() for d in m.delegates]

    def unique_delegate_blobs(self) -> dict[tuple[str, int], list[PteDelegate]]:
        """Delegates grouped by shared blob key (one QNN context per key)."""
        out: dict[tuple[str, int], list[PteDelegate]] = {}
        for d in self.delegates:
            out.setdefault(d.key, []).append(d)
        return out

    def tensor_data(self, value: PteValue, where: str = "tensor") -> np.ndarray:
        """Read-only numpy view (logical layout) of a tensor value's data stored in the program."""
        if value.kind != "tensor":
            raise FormatError(f"{self.path}: {where} is a {value.kind}, not a tensor")
        t: TensorInfo = value.value
        if t.external:
            raise FormatError(
                f"{self.path}: {where} ({t.fully_qualified_name!r}) keeps its data outside the .pte "
                "(an ExecuTorch .ptd data file). qnnrt reads self-contained .pte files only; re-export "
                "without external constants.")
        if not t.has_initial_data:
            raise FormatError(f"{self.path}: {where} has no data in the program")
        dt = t.dtype
        if dt is None:
            raise FormatError(f"{self.path}: {where} has scalar type {t.scalar_type_name}, which "
                              "qnnrt cannot represent in numpy")
        nbytes = t.numel * dt.itemsize
        idx = t.data_buffer_idx
        if t.allocation is not None:   # mutable tensor with an initial value
            if not self.mutable_data_segments:
                raise FormatError(f"{self.path}: {where} has initial data but the program has no "
                                  "mutable_data_segments")
            k = t.mutable_segment_idx
            if k >= len(self.mutable_data_segments):
                raise FormatError(f"{self.path}: {where} names mutable data segment {k}, but the "
                                  f"program has {len(self.mutable_data_segments)}")
            seg_idx, offsets = self.mutable_data_segments[k]
            offset = self._sub_offset(seg_idx, offsets, idx, nbytes, where)
        elif self.constant_segment is not None and len(self.constant_segment[1]) > 0:
            seg_idx, offsets = self.constant_segment
            offset = self._sub_offset(seg_idx, offsets, idx, nbytes, where)
        else:
            if idx >= len(self.constant_buffer):
                raise FormatError(f"{self.path}: {where} uses constant buffer {idx}, but the program "
                                  f"has {len(self.constant_buffer)}")
            offset, size = self.constant_buffer[idx]
            if size < nbytes:
                raise FormatError(f"{self.path}: {where} needs {nbytes} bytes but constant buffer "
                                  f"{idx} holds {size}")
        if offset + nbytes > self.file_size:
            raise FormatError(f"{self.path}: {where}'s data (bytes {offset}..{offset + nbytes}) lies "
                              f"past the end of the file ({self.file_size} bytes); the file is "
                              "truncated.")
        phys_shape = tuple(t.shape[d] for d in t.dim_order) if len(t.dim_order) == len(t.shape) \
            else t.shape
        arr = np.frombuffer(self.buffer, dtype=dt, count=t.numel, offset=offset).reshape(phys_shape)
        if len(t.dim_order) == len(t.shape) and not t.is_contiguous_order:
            arr = arr.transpose(np.argsort(t.dim_order))
        return arr

    def _sub_offset(self, seg_idx: int, offsets: tuple[int, ...], idx: int, nbytes: int,
                    where: str) -> int:
        if seg_idx >= len(self.segments):
            raise FormatError(f"{self.path}: {where}: constant data segment {seg_idx} does not exist "
                              f"(the program has {len(self.segments)} segments)")
        if idx >= len(offsets):
            raise FormatError(f"{self.path}: {where} uses data buffer {idx}, but the segment lists "
                              f"{len(offsets)} offsets")
        seg_off, seg_size = self.segments[seg_idx]
        off = offsets[idx]
        if off + nbytes > seg_size:
            raise FormatError(f"{self.path}: {where}: {nbytes} bytes at offset {off} overrun segment "
                              f"{seg_idx} ({seg_size} bytes)")
        return seg_off + off

    def __repr__(self) -> str:
        return (f"PteProgram({self.path!r}, methods={list(self.methods)}, "
                f"delegates={len(self.delegates)}, size={self.file_size})")


# ---------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------

def is_pte_file(path: str) -> bool:
    """True when the file starts like an ExecuTorch program (identifier ET12 at byte 4)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return len(head) == 8 and head[4:8] == S.FILE_IDENTIFIER


def read_pte(path: str | os.PathLike, *, require_qnn: bool = False) -> PteProgram:
    """Open and parse an ExecuTorch ``.pte`` file through a read-only memory map.

    Validates the structure up front (indices of values, operators, delegates, segments and jump
    targets), so a bad file fails here with :class:`FormatError` and not in the middle of a run.
    With ``require_qnn`` every delegate must be a QNN delegate (``QnnBackend``).
    """
    path = os.fspath(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise FormatError(f"{path}: cannot open the .pte file ({e.strerror or e}). Check the path "
                          "and permissions.") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise FormatError(f"{path}: the file has {size} bytes; an ExecuTorch program has at least "
                              "8 (root offset + 'ET12'). It is truncated or not a .pte file; copy or "
                              "re-export it.")
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise FormatError(f"{path}: cannot memory-map the file ({e})") from None
    try:
        return _parse(path, mm, size, require_qnn)
    except FormatError:
        _close_quietly(mm)
        raise
    except Exception as e:   # never let a malformed file escape as a random Python error
        _close_quietly(mm)
        raise FormatError(f"{path}: malformed ExecuTorch program ({type(e).__name__}: {e}). The file "
                          "is damaged or not a .pte written by ExecuTorch; re-export it.") from e


def _close_quietly(mm) -> None:
    try:
        mm.close()
    except BufferError:
        pass   # views made before the error still exist; the map goes when they do


def _identify(head: bytes) -> str:
    if head[:4] == b"PK\x03\x04":
        return "a ZIP archive (a PyTorch .pt/.pt2 or a QNN DLC?)"
    if head[:8] == b"\x08\x00\x00\x00\x00\x00\x00\x00" or head[:1] == b"\x08":
        return "possibly an ONNX model"
    if len(head) >= 8 and head[4:6] == b"ET" and head[6:8].isdigit():
        return f"an ExecuTorch program of another schema version ({head[4:8].decode()})"
    if struct.unpack_from("<I", head, 0)[0] == _QNN_MAGIC:
        return "a QNN delegate blob extracted from a .pte (QnnContextCustomProtocol)"
    return f"bytes {head[:8].hex(' ')}"


def _parse(path: str, mm, size: int, require_qnn: bool) -> PteProgram:
    ident = bytes(mm[4:8])
    if ident != S.FILE_IDENTIFIER:
        raise FormatError(
            f"{path}: not an ExecuTorch program: the file identifier at byte 4 is {ident!r}, expected "
            f"b'ET12'. The file looks like {_identify(bytes(mm[:16]))}. qnnrt reads .pte files written "
            "by ExecuTorch's to_executorch() / save (schema ET12).")

    header = None
    program_size = size
    if size >= 8 + _EH_MIN_LEN and bytes(mm[8:12]) == _EH_MAGIC:
        length = struct.unpack_from("<I", mm, 12)[0]
        if length < _EH_MIN_LEN:
            raise FormatError(f"{path}: the extended header 'eh00' declares {length} bytes, less than "
                              f"the minimum {_EH_MIN_LEN}; the file is damaged. Re-export it.")
        psize, base = struct.unpack_from("<QQ", mm, 16)
        seg_size = struct.unpack_from("<Q", mm, 32)[0] if length > _EH_MIN_LEN and size >= 40 else 0
        header = ExtendedHeader(length, psize, base, seg_size)
        if psize > size or psize < 8:
            raise FormatError(f"{path}: the extended header says the program data is {psize} bytes but "
                              f"the file has {size}. The file is truncated; copy it again or re-export.")
        if base and base + seg_size > size:
            raise FormatError(
                f"{path}: the extended header says the segments occupy bytes {base}..{base + seg_size} "
                f"but the file has only {size} bytes. The file is truncated (an interrupted copy?); "
                "copy it again or re-export.")
        program_size = psize

    root = S.root_program(mm, program_size)
    prog = PteProgram(path, mm, size, header, program_size, root.version)
    base = header.segment_base_offset if header else 0

    # segments
    for i, seg in enumerate(root.segments):
        off, n = seg.offset, seg.size
        if header is None or header.segment_base_offset == 0:
            raise FormatError(f"{path}: the program lists {len(root.segments)} data segments but has "
                              "no extended header giving their base offset; the file is damaged.")
        a = base + off
        if a + n > size:
            raise FormatError(f"{path}: data segment {i} (bytes {a}..{a + n}) lies past the end of the "
                              f"file ({size} bytes). The file is truncated; copy it again or re-export.")
        prog.segments.append((a, n))
    for i, b in enumerate(root.backend_delegate_data):
        v = b.data
        prog.inline_delegate_data.append(v if v is not None else (0, 0))
    for i, b in enumerate(root.constant_buffer):
        v = b.storage
        prog.constant_buffer.append(v if v is not None else (0, 0))
    cs = root.constant_segment
    if cs is not None:
        prog.constant_segment = (cs.segment_index, tuple(int(x) for x in cs.offsets))
        if len(prog.constant_segment[1]) > 0 and cs.segment_index >= len(prog.segments):
            raise FormatError(f"{path}: constant_segment names segment {cs.segment_index} but the "
                              f"program has {len(prog.segments)} segments; the file is damaged.")
    for m in root.mutable_data_segments:
        prog.mutable_data_segments.append((m.segment_index, tuple(int(x) for x in m.offsets)))
    for nd in root.named_data:
        prog.named_data[nd.key] = nd.segment_index

    plans = root.execution_plan
    if not plans:
        raise FormatError(f"{path}: the program has no execution plans (methods); nothing to run.")
    for k, plan in enumerate(plans):
        meth = _read_plan(prog, plan, k)
        if meth.name in prog.methods:
            raise FormatError(f"{path}: two execution plans are named {meth.name!r}")
        prog.methods[meth.name] = meth

    if require_qnn:
        bad = [f"{d.method}.delegates[{d.index}] ({d.backend_id!r})" for d in prog.delegates
               if not d.is_qnn]
        if bad:
            raise FormatError(
                f"{path}: qnnrt runs QNN delegates only, but this program has delegates of other "
                f"backends: {', '.join(bad)}. Re-export with ExecuTorch's QNN partitioner only "
                f"(backend id {QNN_BACKEND_ID!r}), or keep those parts on the CPU.")
    return prog


MAX_TENSOR_RANK = 16
MAX_TENSOR_ELEMENTS = 1 << 34   # 64 GiB of float32: anything larger is a damaged size field


def _read_value(ev: S.EValue) -> PteValue:
    t, x = ev.val()
    kind = S.KernelTypes.NAMES.get(t)
    if kind is None:
        raise FormatError(f"ExecuTorch program: {ev.where} has unknown value type {t}")
    if t == S.KernelTypes.NONE or t == S.KernelTypes.Null or x is None:
        return PteValue("null" if t == S.KernelTypes.Null or x is None else "none", None)
    if t == S.KernelTypes.Tensor:
        ai = x.allocation_info
        eti = x.extra_tensor_info
        sizes = tuple(int(s) for s in x.sizes)
        dim_order = tuple(int(d) for d in x.dim_order)
        if any(s < 0 for s in sizes):
            raise FormatError(f"ExecuTorch program: {ev.where} has a negative size {list(sizes)}")
        if len(sizes) > MAX_TENSOR_RANK:
            raise FormatError(f"ExecuTorch program: {ev.where} has {len(sizes)} dimensions (at most "
                              f"{MAX_TENSOR_RANK}); the .pte is malformed. Re-export it.")
        numel = 1
        for s in sizes:
            numel *= s
        if numel > MAX_TENSOR_ELEMENTS:
            raise FormatError(f"ExecuTorch program: {ev.where} has shape {list(sizes)[:8]} = {numel} "
                              f"elements, more than the {MAX_TENSOR_ELEMENTS} qnnrt accepts; the .pte "
                              f"is malformed. Re-export it.")
        if dim_order and sorted(dim_order) != list(range(len(sizes))):
            raise FormatError(f"ExecuTorch program: {ev.where} has dim order {list(dim_order)[:8]}, "
                              f"which is not a permutation of its {len(sizes)} dimensions; the .pte "
                              f"is malformed. Re-export it.")
        info = TensorInfo(
            scalar_type=int(x.scalar_type), shape=sizes, dim_order=dim_order,
            data_buffer_idx=int(x.data_buffer_idx),
            allocation=None if ai is None else (int(ai.memory_id), int(ai.memory_offset)),
            shape_dynamism=int(x.shape_dynamism),
            fully_qualified_name=None if eti is None else eti.fully_qualified_name,
            external=bool(eti is not None and eti.location == 1),
            mutable_segment_idx=0 if eti is None else int(eti.mutable_data_segments_idx))
        return PteValue("tensor", info)
    if t in (S.KernelTypes.Int, S.KernelTypes.Bool, S.KernelTypes.Double, S.KernelTypes.String):
        return PteValue(kind, x.value)
    items = x.items
    if t == S.KernelTypes.BoolList:
        return PteValue(kind, tuple(bool(v) for v in items))
    if t == S.KernelTypes.DoubleList:
        return PteValue(kind, tuple(float(v) for v in items))
    return PteValue(kind, tuple(int(v) for v in items))


def _read_plan(prog: PteProgram, plan: S.ExecutionPlan, k: int) -> PteMethod:
    path = prog.path
    name = plan.name or f"plan_{k}"
    where = f"method {name!r}"
    values = [_read_value(ev) for ev in plan.values]
    n_values = len(values)

    def check_value(i: int, what: str) -> int:
        if not 0 <= i < n_values:
            raise FormatError(f"{path}: {where}: {what} refers to value {i}, but the method has "
                              f"{n_values} values; the file is damaged. Re-export it.")
        return int(i)

    for i, v in enumerate(values):
        if v.kind == "tensor_list":
            for j in v.value:
                check_value(j, f"tensor list value {i}")
        elif v.kind == "int_list":
            for j in v.value:
                check_value(j, f"int list value {i}")
                if values[j].kind != "int":
                    raise FormatError(f"{path}: {where}: int list value {i} refers to value {j}, a "
                                      f"{values[j].kind}, where an Int value is required.")
        elif v.kind == "optional_tensor_list":
            for j in v.value:
                if j != -1:
                    check_value(j, f"optional tensor list value {i}")

    operators = [PteOperator(o.name, o.overload) for o in plan.operators]

    delegates = []
    for di, d in enumerate(plan.delegates):
        ref = d.processed
        if ref is None:
            raise FormatError(f"{path}: {where}: delegate {di} ({d.id!r}) has no processed data")
        loc = ref.location
        idx = int(ref.index)
        if loc == S.DataLocation.SEGMENT:
            if idx >= len(prog.segments):
                raise FormatError(f"{path}: {where}: delegate {di} ({d.id!r}) uses data segment "
                                  f"{idx}, but the program has {len(prog.segments)} segments. The file "
                                  "is damaged or truncated; re-export it.")
            off, size = prog.segments[idx]
        elif loc == S.DataLocation.INLINE:
            if idx >= len(prog.inline_delegate_data):
                raise FormatError(f"{path}: {where}: delegate {di} ({d.id!r}) uses inline delegate "
                                  f"data {idx}, but the program has {len(prog.inline_delegate_data)}.")
            off, size = prog.inline_delegate_data[idx]
        else:
            raise FormatError(f"{path}: {where}: delegate {di} has unknown data location {loc}")
        specs = {}
        for cs in d.compile_specs:
            v = cs.value
            specs[cs.key] = b"" if v is None else bytes(prog.buffer[v[0]:v[0] + v[1]])
        delegates.append(PteDelegate(
            index=di, backend_id=d.id, location=S.DataLocation.NAMES[loc], data_index=idx,
            file_offset=off, size=size, blob=prog.view(off, size), compile_specs=specs, method=name))

    chains = []
    for ci, ch in enumerate(plan.chains):
        instrs: list[Instruction] = []
        raw = ch.instructions
        n_instr = len(raw)
        for ii, ins in enumerate(raw):
            t, a = ins.args()
            iw = f"chain {ci} instruction {ii}"
            if a is None:
                raise FormatError(f"{path}: {where}: {iw} has unknown or empty type {t}; the program "
                                  "needs a newer reader or is damaged.")
            if t == S.InstructionArguments.KernelCall:
                op = a.op_index
                if not 0 <= op < len(operators):
                    raise FormatError(f"{path}: {where}: {iw} calls operator {op}, but the method "
                                      f"has {len(operators)} operators.")
                args = tuple(check_value(int(x), f"{iw} ({operators[op].qualified_name})")
                             for x in a.args)
                instrs.append(KernelCall(op, args))
            elif t == S.InstructionArguments.DelegateCall:
                di = a.delegate_index
                if not 0 <= di < len(delegates):
                    raise FormatError(
                        f"{path}: {where}: {iw} calls delegate {di}, but the method has "
                        f"{len(delegates)} delegate(s) (valid: 0..{len(delegates) - 1}). The file is "
                        "damaged; re-export it.")
                args = tuple(check_value(int(x), f"{iw} (delegate {di})") for x in a.args)
                instrs.append(DelegateCall(di, args))
            elif t == S.InstructionArguments.MoveCall:
                instrs.append(MoveCall(check_value(a.move_from, iw), check_value(a.move_to, iw)))
            elif t == S.InstructionArguments.JumpFalseCall:
                dest = a.destination_instruction
                if not 0 <= dest <= n_instr:
                    raise FormatError(f"{path}: {where}: {iw} jumps to instruction {dest}, but the "
                                      f"chain has {n_instr}.")
                instrs.append(JumpFalseCall(check_value(a.cond_value_index, iw), dest))
            elif t == S.InstructionArguments.FreeCall:
                instrs.append(FreeCall(check_value(a.value_index, iw)))
        chains.append(PteChain(tuple(int(x) for x in ch.inputs), tuple(int(x) for x in ch.outputs),
                               instrs))

    def io(indices, prefix):
        out = []
        for i, vi in enumerate(indices):
            vi = check_value(int(vi), f"{prefix} {i}")
            v = values[vi]
            if v.kind == "tensor":
                t: TensorInfo = v.value
                out.append(PteIOSpec(f"{prefix}_{i}", vi, "tensor", t.shape, t.dtype, t.scalar_type, t))
            else:
                out.append(PteIOSpec(f"{prefix}_{i}", vi, v.kind))
        return out

    cm = plan.container_meta_type
    return PteMethod(
        name=name, values=values, inputs=io(plan.inputs, "input"), outputs=io(plan.outputs, "output"),
        chains=chains, operators=operators, delegates=delegates,
        non_const_buffer_sizes=tuple(int(x) for x in plan.non_const_buffer_sizes), program=prog,
        input_container_spec=None if cm is None else cm.encoded_inp_str,
        output_container_spec=None if cm is None else cm.encoded_out_str)


# ---------------------------------------------------------------------------------------------
# QNN delegates
# ---------------------------------------------------------------------------------------------

def unwrap_qnn_delegate(delegate: "PteDelegate | memoryview | bytes | bytearray") -> QnnDelegateBlob:
    """Find the QNN context binary inside a QNN delegate's processed data.

    Accepts a :class:`PteDelegate` (must be a ``QnnBackend`` delegate) or raw bytes. Recognises
    ExecuTorch's ``QnnContextCustomProtocol`` wrapper (magic 0x5678ABCD, int64 signature, uint64 size,
    binary at byte 256 — or at byte 20 for ExecuTorch 1.0/1.1 files) and otherwise treats the blob as
    a bare context binary. DLC payloads (online-prepare) and the old QCIR wrapper are rejected.
    """
    where = "QNN delegate data"
    if isinstance(delegate, PteDelegate):
        where = f"delegate {delegate.index} of method {delegate.method!r}"
        if not delegate.is_qnn:
            raise FormatError(
                f"{where} belongs to backend {delegate.backend_id!r}, not {QNN_BACKEND_ID!r}; qnnrt "
                "runs QNN delegates only. Re-export with ExecuTorch's QNN partitioner, or keep this "
                "part on the CPU.")
        blob = delegate.blob
    else:
        blob = memoryview(delegate)
    blob = blob.cast("B") if blob.format != "B" or blob.ndim != 1 else blob
    n = len(blob)
    if n == 0:
        raise FormatError(f"{where} is empty; the .pte file is damaged. Re-export it.")
    magic = struct.unpack_from("<I", blob, 0)[0] if n >= 4 else None
    if magic == _QNN_MAGIC:
        if n < _QNN_HEADER_FIELDS:
            raise FormatError(f"{where}: QnnContextCustomProtocol header is cut short ({n} bytes, "
                              f"needs {_QNN_HEADER_FIELDS}); the file is truncated.")
        signature, declared = struct.unpack_from("<qQ", blob, 4)
        if n == _QNN_HEADER_PADDED + declared or (n > _QNN_HEADER_PADDED + declared and
                                                   n != _QNN_HEADER_FIELDS + declared):
            hs = _QNN_HEADER_PADDED
            form = "256-byte header (ExecuTorch >= 1.2)"
        elif n >= _QNN_HEADER_FIELDS + declared:
            hs = _QNN_HEADER_FIELDS
            form = "20-byte header (ExecuTorch 1.0/1.1)"
        else:
            raise FormatError(
                f"{where}: QnnContextCustomProtocol header declares a {declared}-byte context binary "
                f"but the delegate data holds only {n} bytes. The .pte is truncated or damaged; "
                "re-export it.")
        if declared == 0:
            raise FormatError(f"{where}: QnnContextCustomProtocol header declares an empty context "
                              "binary (online-prepare export?). Re-export with a compiled context.")
        return QnnDelegateBlob(
            binary=blob[hs:hs + declared], wrapper="QnnContextCustomProtocol", header_size=hs,
            signature=signature, declared_size=declared,
            description=(f"ExecuTorch QnnContextCustomProtocol wrapper, {form}: magic 0x5678ABCD, "
                         f"signature {signature}, context binary of {declared} bytes at offset {hs}"))
    if magic == _QNN_QCIR_MAGIC:
        raise FormatError(f"{where} uses the QCIR wrapper (magic 0x1234ABCD) of ExecuTorch < 1.0, which "
                          "holds an un-compiled graph, not a context binary. Re-export with a current "
                          "ExecuTorch.")
    if bytes(blob[:4]) == b"PK\x03\x04":
        raise FormatError(f"{where} is a QNN DLC (ZIP) from an online-prepare export, not a context "
                          "binary. Re-export with online_prepare=False so the delegate holds a "
                          "compiled context binary.")
    return QnnDelegateBlob(binary=blob, wrapper="none", header_size=0, signature=None,
                           declared_size=None,
                           description=f"no ExecuTorch wrapper found; treated as a bare QNN context "
                                       f"binary of {n} bytes")


def qnn_context_binary(delegate: "PteDelegate | memoryview | bytes | bytearray") -> memoryview:
    """The QNN context binary of a QNN delegate (a zero-copy view). See :func:`unwrap_qnn_delegate`."""
    return unwrap_qnn_delegate(delegate).binary


def _graph_io_number(name: str) -> int | None:
    """The position number in an ExecuTorch QNN tensor name: ``input_3_x@0`` -> 3."""
    p = name.find("_")
    if p < 0:
        return None
    digits = ""
    for ch in name[p + 1:]:
        if ch.isdigit() or (not digits and ch in "+-"):
            digits += ch
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return None


def qnn_graph_io_order(input_names: Iterable[str], output_names: Iterable[str]
                       ) -> tuple[list[int], list[int]]:
    """How ExecuTorch's QNN backend binds a DelegateCall's args to a graph's tensors.

    Returns (input positions, output positions): DelegateCall input ``k`` feeds graph input
    ``input_positions[k]``; DelegateCall output ``k`` is graph output ``output_positions[k]``.
    Rules (QnnManager::AllocateTensor / QnnExecuTorchBackend::execute): graph inputs are ordered by the
    integer after the first ``_`` of their names (``input_0_x@0``, ``input_1_...``); inputs whose
    name contains ``mutbuf_`` are fed by the delegate itself and take no arg; outputs keep the graph's
    order, and only those named ``output_*`` without ``mutbuf_`` take an arg. Names without a number
    keep their graph order (context binaries not made by ExecuTorch).
    """
    ins = list(input_names)
    outs = list(output_names)
    keyed = []
    numbered = all(_graph_io_number(n) is not None for n in ins)
    for pos, nm in enumerate(ins):
        if "mutbuf_" in nm:
            continue
        keyed.append(((_graph_io_number(nm) if numbered else pos), pos))
    keyed.sort()
    in_order = [pos for _, pos in keyed]
    all_prefixed = any(n.startswith("output_") for n in outs)
    out_order = [pos for pos, nm in enumerate(outs)
                 if "mutbuf_" not in nm and (nm.startswith("output_") or not all_prefixed)]
    return in_order, out_order


def parse_qnn_compile_spec(delegate_or_bytes) -> dict:
    """Decode a delegate's ``qnn_compile_spec`` (see qnnrt/executorch/compile_spec.py). Never raises."""
    if isinstance(delegate_or_bytes, PteDelegate):
        data = bytes(delegate_or_bytes.compile_specs.get("qnn_compile_spec", b""))
    else:
        data = bytes(delegate_or_bytes)
    return _compile_spec.parse_qnn_compile_spec(data)


# ---------------------------------------------------------------------------------------------
# constant methods
# ---------------------------------------------------------------------------------------------
_SCALAR_KINDS = ("int", "bool", "double", "string")
_LIST_KINDS = ("double_list", "bool_list")


def is_constant_method(method: PteMethod) -> bool:
    """A method without inputs or delegates whose outputs are scalars, lists of them or constant
    tensors (what ExecuTorch's exporters write for metadata: ``get_n_layers``, ...)."""
    if method.inputs or method.delegates or not method.outputs:
        return False
    if any(isinstance(i, (KernelCall, DelegateCall)) for i in method.instructions):
        return False
    for o in method.outputs:
        v = method.values[o.value_index]
        if v.kind in _SCALAR_KINDS + _LIST_KINDS + ("int_list",):
            continue
        if v.kind == "tensor" and v.value.has_initial_data:
            continue
        return False
    return True


def constant_method_value(method: PteMethod) -> Any:
    """The value a constant method returns: one output -> that value, several -> a list (an
    exported Python list, e.g. ``[scale, zero_point, qmin, qmax, "torch.uint8"]``). Ints, floats,
    bools and strings as Python values, int/float/bool lists as lists, tensors as numpy arrays."""
    out = []
    for o in method.outputs:
        v = method.values[o.value_index]
        if v.kind in _SCALAR_KINDS:
            x: Any = v.value
            if v.kind == "string" and isinstance(x, (bytes, bytearray)):
                x = x.decode(errors="replace")
        elif v.kind in _LIST_KINDS:
            x = list(v.value)
        elif v.kind == "int_list":
            x = [int(method.values[j].value) for j in v.value]
        else:
            x = np.array(method.constant(o.value_index))
        out.append(x)
    return out[0] if len(out) == 1 else out
