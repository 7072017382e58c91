"""The in-memory model of an ExecuTorch ``.pte`` program (what :mod:`qnnrt.executorch.reader`
returns): ScalarType numbers, tensors, values, instructions, operators, delegates, methods, the
program. Plain data over views of the file's memory map; no parsing here."""
from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from qnnrt.core.load_cache import FileIdentity, Origin
from qnnrt.errors import FormatError

QNN_BACKEND_ID = "QnnBackend"

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
except ImportError:  # pragma: no cover - ml_dtypes missing
    pass


def scalar_type_to_numpy(scalar_type: int) -> np.dtype | None:
    """numpy dtype of an ExecuTorch ScalarType number, None when numpy has no equivalent."""
    t = _SCALAR_TO_NP.get(int(scalar_type))
    return None if t is None else np.dtype(t)


def numpy_to_scalar_type(dtype: DTypeLike) -> int:
    """ExecuTorch ScalarType number of a numpy dtype (inverse of :func:`scalar_type_to_numpy`)."""
    dt = np.dtype(dtype)
    for k, v in _SCALAR_TO_NP.items():
        if k != 22 and np.dtype(v) == dt:
            return k
    raise FormatError(f"numpy dtype {dt} has no ExecuTorch ScalarType")



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

    def __init__(self, path: str, mm: mmap.mmap, file_size: int, header: ExtendedHeader | None,
                 program_size: int, version: int):
        self.path = path
        self._mm: mmap.mmap | None = mm
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
        self.identity: FileIdentity | None = None          # the file as mapped (the load cache's key)

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

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def buffer(self) -> mmap.mmap:
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

    def origin_of(self, view: memoryview) -> Origin | None:
        """Where `view` (a view of this file's mapping) lies in the file, for the load cache; None
        for bytes elsewhere or a file whose identity is unknown."""
        if self.identity is None or self._mm is None:
            return None
        base = np.frombuffer(self._mm, np.uint8).ctypes.data
        at = np.frombuffer(view, np.uint8).ctypes.data - base
        if at < 0 or at + view.nbytes > self.file_size:
            return None
        return Origin(self.identity, at, view.nbytes)

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
