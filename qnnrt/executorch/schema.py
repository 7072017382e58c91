"""Table accessors for ExecuTorch's ``Program`` flatbuffer (schema ``program.fbs``, identifier ``ET12``).

This is a small, hand-written schema of our own: each class below knows the vtable slot of every field
it reads. Field numbering follows the order of declaration in ``program.fbs``; a union field occupies
two slots (its ``_type`` byte first, then the offset of the value table).

Every access is bounds-checked against the readable region, so a damaged file gives a
:class:`qnnrt.errors.FormatError` naming the table path (``execution_plan[0].values[7]``) instead of a
``struct.error`` or a garbage value. Vectors of scalars are returned as numpy views over the buffer
(zero-copy); byte vectors are returned as ``(absolute offset, length)`` so callers can slice the memory
map themselves.
"""
from __future__ import annotations

import mmap
import struct
from typing import Any, NoReturn, TypeVar

import numpy as np
from flatbuffers import number_types as _N
from flatbuffers.table import Table as _FbTable

from qnnrt.errors import FormatError

__all__ = [
    "FILE_IDENTIFIER", "KernelTypes", "InstructionArguments", "DataLocation", "Program",
    "ExecutionPlan", "EValue", "TensorT", "Chain", "Instruction", "Operator", "BackendDelegate",
    "DataSegment", "SubsegmentOffsets", "root_program",
]

FILE_IDENTIFIER = b"ET12"

FbBuffer = bytes | bytearray | memoryview | mmap.mmap   # what a flatbuffer is read from
TableT = TypeVar("TableT", bound="Table")


class KernelTypes:
    """Member numbers of the ``KernelTypes`` union (0 means no value)."""
    NONE = 0
    Null = 1
    Int = 2
    Bool = 3
    Double = 4
    Tensor = 5
    String = 6
    IntList = 7
    DoubleList = 8
    BoolList = 9
    TensorList = 10
    OptionalTensorList = 11

    NAMES = {0: "none", 1: "null", 2: "int", 3: "bool", 4: "double", 5: "tensor", 6: "string",
             7: "int_list", 8: "double_list", 9: "bool_list", 10: "tensor_list",
             11: "optional_tensor_list"}


class InstructionArguments:
    """Member numbers of the ``InstructionArguments`` union."""
    NONE = 0
    KernelCall = 1
    DelegateCall = 2
    MoveCall = 3
    JumpFalseCall = 4
    FreeCall = 5


class DataLocation:
    INLINE = 0
    SEGMENT = 1
    NAMES = {0: "INLINE", 1: "SEGMENT"}


def _slot(i: int) -> int:
    """vtable byte offset of the i-th declared field."""
    return 4 + 2 * i


class Table:
    """A bounds-checked view of one flatbuffer table (wraps ``flatbuffers.table.Table``)."""

    __slots__ = ("_t", "_end", "where")

    def __init__(self, buf: FbBuffer, pos: int, end: int, where: str) -> None:
        self._end = end
        self.where = where
        self._check(pos, 4, "table")
        self._t = _FbTable(buf, pos)
        vt = pos - self._t.Get(_N.SOffsetTFlags, pos)
        self._check(vt, 4, "vtable")
        vt_len = self._t.Get(_N.VOffsetTFlags, vt)
        obj_len = self._t.Get(_N.VOffsetTFlags, vt + 2)
        if vt_len < 4 or vt_len % 2:
            self._fail(f"has a malformed vtable (length {vt_len})")
        self._check(vt, vt_len, "vtable")
        self._check(pos, obj_len, "table body")

    # -- errors ------------------------------------------------------------------------------
    def _fail(self, msg: str) -> NoReturn:
        raise FormatError(f"ExecuTorch program: {self.where} {msg}. The .pte file is damaged or was "
                          "not written by ExecuTorch; re-export it.")

    def _check(self, pos: int, n: int, what: str) -> None:
        if pos < 0 or n < 0 or pos + n > self._end:
            self._fail(f"points outside the program data ({what} at byte {pos}, {n} bytes, "
                       f"program data ends at {self._end})")

    # -- fields ------------------------------------------------------------------------------
    def _off(self, i: int) -> int:
        return self._t.Offset(_slot(i))

    def has(self, i: int) -> bool:
        return self._off(i) != 0

    def _scalar(self, i: int, flags: Any, default: Any) -> Any:
        o = self._off(i)
        if not o:
            return default
        self._check(self._t.Pos + o, flags.bytewidth, f"field {i}")
        return self._t.Get(flags, self._t.Pos + o)

    def u8(self, i: int, d: int = 0) -> int:
        return self._scalar(i, _N.Uint8Flags, d)

    def i8(self, i: int, d: int = 0) -> int:
        return self._scalar(i, _N.Int8Flags, d)

    def boolean(self, i: int, d: bool = False) -> bool:
        return bool(self._scalar(i, _N.Uint8Flags, int(d)))

    def i32(self, i: int, d: int = 0) -> int:
        return self._scalar(i, _N.Int32Flags, d)

    def u32(self, i: int, d: int = 0) -> int:
        return self._scalar(i, _N.Uint32Flags, d)

    def i64(self, i: int, d: int = 0) -> int:
        return self._scalar(i, _N.Int64Flags, d)

    def u64(self, i: int, d: int = 0) -> int:
        return self._scalar(i, _N.Uint64Flags, d)

    def f64(self, i: int, d: float = 0.0) -> float:
        return self._scalar(i, _N.Float64Flags, d)

    def _ref(self, i: int) -> int | None:
        """Absolute position of the object an offset field points to, or None when absent."""
        o = self._off(i)
        if not o:
            return None
        p = self._t.Pos + o
        self._check(p, 4, f"offset of field {i}")
        return self._t.Indirect(p)

    def string(self, i: int, d: str | None = None) -> str | None:
        p = self._ref(i)
        if p is None:
            return d
        self._check(p, 4, f"string length of field {i}")
        n = self._t.Get(_N.Uint32Flags, p)
        self._check(p + 4, n, f"string of field {i}")
        raw = bytes(self._t.Bytes[p + 4:p + 4 + n])
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self._fail(f"has a string (field {i}) that is not UTF-8")

    def table(self, i: int, cls: type[TableT], where: str) -> TableT | None:
        p = self._ref(i)
        if p is None:
            return None
        return cls(self._t.Bytes, p, self._end, where)

    def vector(self, i: int, elem_size: int) -> tuple[int, int] | None:
        """(absolute start of the elements, element count) of a vector field, None when absent."""
        p = self._ref(i)
        if p is None:
            return None
        self._check(p, 4, f"vector length of field {i}")
        n = self._t.Get(_N.Uint32Flags, p)
        self._check(p + 4, n * elem_size, f"vector of field {i} ({n} elements)")
        return p + 4, n

    def scalars(self, i: int, dtype: str) -> np.ndarray:
        """A vector of scalars as a read-only numpy view (empty array when absent)."""
        dt = np.dtype(dtype)
        v = self.vector(i, dt.itemsize)
        if v is None or v[1] == 0:
            return np.zeros(0, dt)
        start, n = v
        return np.frombuffer(self._t.Bytes, dtype=dt, count=n, offset=start).copy()

    def tables(self, i: int, cls: type[TableT], where: str) -> list[TableT]:
        v = self.vector(i, 4)
        if v is None:
            return []
        start, n = v
        buf = self._t.Bytes
        out = []
        for k in range(n):
            p = start + 4 * k
            out.append(cls(buf, p + struct.unpack_from("<I", buf, p)[0], self._end, f"{where}[{k}]"))
        return out

    def table_count(self, i: int) -> int:
        v = self.vector(i, 4)
        return 0 if v is None else v[1]

    def union(self, type_field: int, classes: dict[int, type[Table]], where: str) -> tuple[int, Any]:
        """(type number, table or None) of a union stored at slots type_field, type_field+1; the
        table is of class `classes[type number]` (Any to mypy: the class follows the tag)."""
        t = self.u8(type_field, 0)
        if t == 0:
            return 0, None
        cls = classes.get(t)
        if cls is None:
            return t, None
        return t, self.table(type_field + 1, cls, where)


# --- tables, in the order of program.fbs -----------------------------------------------------

class ContainerMetadata(Table):
    encoded_inp_str = property(lambda s: s.string(0))
    encoded_out_str = property(lambda s: s.string(1))


class AllocationDetails(Table):
    memory_id = property(lambda s: s.u32(0))

    @property
    def memory_offset(self) -> int:
        return self.u32(1) | (self.u32(2) << 32)


class ExtraTensorInfo(Table):
    mutable_data_segments_idx = property(lambda s: s.u64(0))
    fully_qualified_name = property(lambda s: s.string(1))
    location = property(lambda s: s.i8(2))        # 0 CONSTANT_SEGMENT, 1 EXTERNAL


class TensorT(Table):
    scalar_type = property(lambda s: s.i8(0))
    storage_offset = property(lambda s: s.i32(1))
    sizes = property(lambda s: s.scalars(2, "<i4"))
    dim_order = property(lambda s: s.scalars(3, "u1"))
    requires_grad = property(lambda s: s.boolean(4))
    data_buffer_idx = property(lambda s: s.u32(5))
    allocation_info = property(lambda s: s.table(6, AllocationDetails, s.where + ".allocation_info"))
    layout = property(lambda s: s.i8(7))
    shape_dynamism = property(lambda s: s.i8(8))
    extra_tensor_info = property(lambda s: s.table(9, ExtraTensorInfo, s.where + ".extra_tensor_info"))


class NullT(Table):
    pass


class IntT(Table):
    value = property(lambda s: s.i64(0))


class BoolT(Table):
    value = property(lambda s: s.boolean(0))


class DoubleT(Table):
    value = property(lambda s: s.f64(0))


class StringT(Table):
    value = property(lambda s: s.string(0, ""))


class IntListT(Table):
    items = property(lambda s: s.scalars(0, "<i8"))


class DoubleListT(Table):
    items = property(lambda s: s.scalars(0, "<f8"))


class BoolListT(Table):
    items = property(lambda s: s.scalars(0, "u1").astype(bool))


class TensorListT(Table):
    items = property(lambda s: s.scalars(0, "<i4"))


class OptionalTensorListT(Table):
    items = property(lambda s: s.scalars(0, "<i4"))


_KERNEL_TYPE_CLASSES = {
    KernelTypes.Null: NullT, KernelTypes.Int: IntT, KernelTypes.Bool: BoolT,
    KernelTypes.Double: DoubleT, KernelTypes.Tensor: TensorT, KernelTypes.String: StringT,
    KernelTypes.IntList: IntListT, KernelTypes.DoubleList: DoubleListT,
    KernelTypes.BoolList: BoolListT, KernelTypes.TensorList: TensorListT,
    KernelTypes.OptionalTensorList: OptionalTensorListT,
}


class EValue(Table):
    def val(self) -> tuple[int, Any]:
        """(KernelTypes number, value table or None)."""
        return self.union(0, _KERNEL_TYPE_CLASSES, self.where + ".val")


class Operator(Table):
    name = property(lambda s: s.string(0, ""))
    overload = property(lambda s: s.string(1, ""))


class KernelCallT(Table):
    op_index = property(lambda s: s.i32(0))
    args = property(lambda s: s.scalars(1, "<i4"))


class DelegateCallT(Table):
    delegate_index = property(lambda s: s.i32(0))
    args = property(lambda s: s.scalars(1, "<i4"))


class MoveCallT(Table):
    move_from = property(lambda s: s.i32(0))
    move_to = property(lambda s: s.i32(1))


class JumpFalseCallT(Table):
    cond_value_index = property(lambda s: s.i32(0))
    destination_instruction = property(lambda s: s.i32(1))


class FreeCallT(Table):
    value_index = property(lambda s: s.i32(0))


_INSTRUCTION_CLASSES = {
    InstructionArguments.KernelCall: KernelCallT, InstructionArguments.DelegateCall: DelegateCallT,
    InstructionArguments.MoveCall: MoveCallT, InstructionArguments.JumpFalseCall: JumpFalseCallT,
    InstructionArguments.FreeCall: FreeCallT,
}


class Instruction(Table):
    def args(self) -> tuple[int, Any]:
        return self.union(0, _INSTRUCTION_CLASSES, self.where + ".instr_args")


class Chain(Table):
    inputs = property(lambda s: s.scalars(0, "<i4"))
    outputs = property(lambda s: s.scalars(1, "<i4"))
    instructions = property(lambda s: s.tables(2, Instruction, s.where + ".instructions"))


class BackendDelegateDataReference(Table):
    location = property(lambda s: s.i8(0))
    index = property(lambda s: s.u32(1))


class CompileSpec(Table):
    key = property(lambda s: s.string(0, ""))
    value = property(lambda s: s.vector(1, 1))      # (offset, length) or None


class BackendDelegate(Table):
    id = property(lambda s: s.string(0, ""))
    processed = property(lambda s: s.table(1, BackendDelegateDataReference, s.where + ".processed"))
    compile_specs = property(lambda s: s.tables(2, CompileSpec, s.where + ".compile_specs"))


class ExecutionPlan(Table):
    name = property(lambda s: s.string(0, ""))
    container_meta_type = property(lambda s: s.table(1, ContainerMetadata, s.where + ".container_meta_type"))
    values = property(lambda s: s.tables(2, EValue, s.where + ".values"))
    inputs = property(lambda s: s.scalars(3, "<i4"))
    outputs = property(lambda s: s.scalars(4, "<i4"))
    chains = property(lambda s: s.tables(5, Chain, s.where + ".chains"))
    operators = property(lambda s: s.tables(6, Operator, s.where + ".operators"))
    delegates = property(lambda s: s.tables(7, BackendDelegate, s.where + ".delegates"))
    non_const_buffer_sizes = property(lambda s: s.scalars(8, "<i8"))


class Buffer(Table):
    storage = property(lambda s: s.vector(0, 1))     # (offset, length) or None


class BackendDelegateInlineData(Table):
    data = property(lambda s: s.vector(0, 1))        # (offset, length) or None


class DataSegment(Table):
    offset = property(lambda s: s.u64(0))
    size = property(lambda s: s.u64(1))


class SubsegmentOffsets(Table):
    segment_index = property(lambda s: s.u32(0))
    offsets = property(lambda s: s.scalars(1, "<u8"))


class NamedData(Table):
    key = property(lambda s: s.string(0, ""))
    segment_index = property(lambda s: s.u32(1))


class Program(Table):
    version = property(lambda s: s.u32(0))
    execution_plan = property(lambda s: s.tables(1, ExecutionPlan, "execution_plan"))
    constant_buffer = property(lambda s: s.tables(2, Buffer, "constant_buffer"))
    backend_delegate_data = property(lambda s: s.tables(3, BackendDelegateInlineData,
                                                        "backend_delegate_data"))
    segments = property(lambda s: s.tables(4, DataSegment, "segments"))
    constant_segment = property(lambda s: s.table(5, SubsegmentOffsets, "constant_segment"))
    mutable_data_segments = property(lambda s: s.tables(6, SubsegmentOffsets, "mutable_data_segments"))
    named_data = property(lambda s: s.tables(7, NamedData, "named_data"))


def root_program(buf: FbBuffer, end: int) -> Program:
    """The root ``Program`` table of a flatbuffer occupying ``buf[0:end]``."""
    if end < 8:
        raise FormatError(f"ExecuTorch program: only {end} bytes, too short for a flatbuffer "
                          "(needs at least 8). The file is truncated; copy or re-export it.")
    root = struct.unpack_from("<I", buf, 0)[0]
    if root + 4 > end:
        raise FormatError(f"ExecuTorch program: the root table offset {root} lies past the end of "
                          f"the program data ({end} bytes). The file is truncated or damaged; "
                          "copy or re-export it.")
    return Program(buf, root, end, "Program")
