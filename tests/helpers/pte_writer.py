"""A small writer of ExecuTorch ``.pte`` files for tests (no ExecuTorch needed).

Builds the ``Program`` flatbuffer of ExecuTorch's ``program.fbs`` with the ``flatbuffers`` package,
inserts the 32-byte extended header ("eh00") after the file identifier, and appends data segments
(delegate blobs, the constant segment) aligned like ExecuTorch does. QNN delegate blobs can be wrapped
in the QnnContextCustomProtocol header with :func:`qnn_wrap`.

Typical use::

    b = PteBuilder()
    seg = b.add_segment(qnn_wrap(context_binary))
    m = b.method("forward")
    x = m.tensor(np.float32, (1, 4))
    w = m.constant(np.eye(4, dtype=np.float32))
    y = m.tensor(np.float32, (1, 4))
    z = m.tensor(np.float32, (1, 4))
    m.kernel("aten::mm.out", [x, w, y, y])
    d = m.delegate("QnnBackend", segment=seg)
    m.delegate_call(d, [y, z])
    m.inputs, m.outputs = [x], [z]
    b.save(tmp_path / "model.pte")
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np

# union member numbers (program.fbs)
_KT = {"null": 1, "int": 2, "bool": 3, "double": 4, "tensor": 5, "string": 6, "int_list": 7,
       "double_list": 8, "bool_list": 9, "tensor_list": 10, "optional_tensor_list": 11}
_IA = {"kernel": 1, "delegate": 2, "move": 3, "jump_false": 4, "free": 5}

_NP_TO_ST = {np.dtype(np.uint8): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2,
             np.dtype(np.int32): 3, np.dtype(np.int64): 4, np.dtype(np.float16): 5,
             np.dtype(np.float32): 6, np.dtype(np.float64): 7, np.dtype(np.bool_): 11,
             np.dtype(np.uint16): 27, np.dtype(np.uint32): 28, np.dtype(np.uint64): 29}

QNN_MAGIC = 0x5678ABCD


def scalar_type(dtype) -> int:
    if isinstance(dtype, int):
        return dtype
    return _NP_TO_ST[np.dtype(dtype)]


def qnn_wrap(binary: bytes, signature: int = 0x1234_5678_9ABC, legacy: bool = False) -> bytes:
    """Wrap a context binary as ExecuTorch's QNN backend does (QnnContextCustomProtocol).

    magic 0x5678ABCD (uint32), signature (int64), binary size (uint64), zero padding to 256 bytes
    (``legacy=True``: no padding, the ExecuTorch 1.0/1.1 form), then the binary.
    """
    head = struct.pack("<IqQ", QNN_MAGIC, signature, len(binary))
    if not legacy:
        head += b"\0" * (256 - len(head))
    return head + bytes(binary)


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@dataclass
class _Value:
    kind: str
    value: Any = None


@dataclass
class _Instr:
    kind: str
    a: Any
    b: Any = None


@dataclass
class _Delegate:
    backend_id: str
    location: int          # 0 INLINE, 1 SEGMENT
    index: int
    compile_specs: dict = field(default_factory=dict)


class MethodBuilder:
    def __init__(self, program: "PteBuilder", name: str):
        self.program = program
        self.name = name
        self.values: list[_Value] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.instructions: list[_Instr] = []
        self.operators: list[tuple[str, str]] = []
        self.delegates: list[_Delegate] = []
        self.non_const_buffer_sizes: list[int] = [0]

    # values
    def _add(self, kind, value=None) -> int:
        self.values.append(_Value(kind, value))
        return len(self.values) - 1

    def tensor(self, dtype, shape, *, dim_order=None, data_buffer_idx=0, allocation=None,
               dynamism=0, fqn=None, external=False) -> int:
        shape = tuple(int(s) for s in shape)
        return self._add("tensor", dict(
            scalar_type=scalar_type(dtype), sizes=shape,
            dim_order=tuple(range(len(shape))) if dim_order is None else tuple(dim_order),
            data_buffer_idx=data_buffer_idx, allocation=allocation, dynamism=dynamism, fqn=fqn,
            external=external))

    def constant(self, array: np.ndarray, *, dim_order=None) -> int:
        """A constant tensor whose data is stored in the program (segment or inline buffer)."""
        a = np.asarray(array)
        phys = a if dim_order is None else np.transpose(a, dim_order)
        idx = self.program.add_constant(np.ascontiguousarray(phys).tobytes())
        return self.tensor(a.dtype, a.shape, dim_order=dim_order, data_buffer_idx=idx)

    def int(self, v: int) -> int:
        return self._add("int", int(v))

    def bool(self, v: bool) -> int:
        return self._add("bool", bool(v))

    def double(self, v: float) -> int:
        return self._add("double", float(v))

    def string(self, v: str) -> int:
        return self._add("string", v)

    def null(self) -> int:
        return self._add("null")

    def int_list(self, items) -> int:
        """An IntList: its items are Int values (ExecuTorch boxes them), created here."""
        idx = [self.int(v) for v in items]
        return self._add("int_list", idx)

    def double_list(self, items) -> int:
        return self._add("double_list", [float(v) for v in items])

    def bool_list(self, items) -> int:
        return self._add("bool_list", [bool(v) for v in items])

    def tensor_list(self, value_indices) -> int:
        return self._add("tensor_list", [int(v) for v in value_indices])

    def optional_tensor_list(self, value_indices) -> int:
        return self._add("optional_tensor_list", [int(v) for v in value_indices])

    def raw_value(self, kind: str, value) -> int:
        return self._add(kind, value)

    # operators / delegates / instructions
    def operator(self, qualified: str) -> int:
        name, _, overload = qualified.partition(".")
        key = (name, overload)
        if key not in self.operators:
            self.operators.append(key)
        return self.operators.index(key)

    def kernel(self, qualified: str, args) -> None:
        self.instructions.append(_Instr("kernel", self.operator(qualified), list(args)))

    def kernel_index(self, op_index: int, args) -> None:
        self.instructions.append(_Instr("kernel", op_index, list(args)))

    def delegate(self, backend_id: str = "QnnBackend", *, segment: int | None = None,
                 inline: int | None = None, compile_specs: dict | None = None) -> int:
        if (segment is None) == (inline is None):
            raise ValueError("give exactly one of segment= or inline=")
        loc, idx = (1, segment) if segment is not None else (0, inline)
        self.delegates.append(_Delegate(backend_id, loc, idx, dict(compile_specs or {})))
        return len(self.delegates) - 1

    def delegate_call(self, delegate_index: int, args) -> None:
        self.instructions.append(_Instr("delegate", delegate_index, list(args)))

    def move(self, src: int, dst: int) -> None:
        self.instructions.append(_Instr("move", src, dst))

    def jump_false(self, cond: int, dest: int) -> None:
        self.instructions.append(_Instr("jump_false", cond, dest))

    def free(self, v: int) -> None:
        self.instructions.append(_Instr("free", v))


class PteBuilder:
    def __init__(self, *, constants: str = "segment", extended_header: bool = True,
                 segment_alignment: int = 128, identifier: bytes = b"ET12"):
        assert constants in ("segment", "inline")
        self.constants_mode = constants
        self.extended_header = extended_header
        self.segment_alignment = segment_alignment
        self.identifier = identifier
        self.methods: list[MethodBuilder] = []
        self.segments: list[bytes] = []
        self.inline_delegate_data: list[bytes] = []
        self.constants: list[bytes] = [b""]          # index 0 reserved for non-constants
        self._constant_segment_index: int | None = None

    def method(self, name: str) -> MethodBuilder:
        m = MethodBuilder(self, name)
        self.methods.append(m)
        return m

    def add_segment(self, data: bytes) -> int:
        self.segments.append(bytes(data))
        return len(self.segments) - 1

    def add_inline_delegate_data(self, data: bytes) -> int:
        self.inline_delegate_data.append(bytes(data))
        return len(self.inline_delegate_data) - 1

    def add_constant(self, data: bytes) -> int:
        self.constants.append(bytes(data))
        return len(self.constants) - 1

    # -- serialization ----------------------------------------------------------------------
    @staticmethod
    def _vec(b, items, size: int, prepend):
        b.StartVector(size, len(items), size)
        for x in reversed(items):
            prepend(int(x))
        return b.EndVector()

    def _vec_i32(self, b, items):
        return self._vec(b, items, 4, b.PrependInt32)

    def _vec_i64(self, b, items):
        return self._vec(b, items, 8, b.PrependInt64)

    def _vec_u64(self, b, items):
        return self._vec(b, items, 8, b.PrependUint64)

    def _vec_offsets(self, b, offs):
        return self._vec(b, offs, 4, b.PrependUOffsetTRelative)

    def _byte_tables(self, b, blobs):
        """A vector of one-field tables each holding bytes (Buffer / BackendDelegateInlineData)."""
        tables = []
        for blob in blobs:
            data = self._bytes(b, blob, 16)
            b.StartObject(1)
            b.PrependUOffsetTRelativeSlot(0, data, 0)
            tables.append(b.EndObject())
        return self._vec_offsets(b, tables)

    def _bytes(self, b, data: bytes, align: int = 16):
        b.StartVector(1, len(data), align)
        b.head = b.head - len(data)
        b.Bytes[b.head:b.head + len(data)] = data
        return b.EndVector()

    def _value(self, b, v: _Value):
        k = v.kind
        if k == "tensor":
            t = v.value
            sizes = self._vec_i32(b, t["sizes"])
            b.StartVector(1, len(t["dim_order"]), 1)
            for d in reversed(t["dim_order"]):
                b.PrependUint8(int(d))
            dim_order = b.EndVector()
            alloc = None
            if t["allocation"] is not None:
                mem_id, off = t["allocation"]
                b.StartObject(3)
                b.PrependUint32Slot(0, mem_id, 0)
                b.PrependUint32Slot(1, off & 0xFFFFFFFF, 0)
                b.PrependUint32Slot(2, off >> 32, 0)
                alloc = b.EndObject()
            eti = None
            if t["fqn"] is not None or t["external"]:
                fqn = b.CreateString(t["fqn"] or "")
                b.StartObject(3)
                b.PrependUOffsetTRelativeSlot(1, fqn, 0)
                b.PrependInt8Slot(2, 1 if t["external"] else 0, 0)
                eti = b.EndObject()
            b.StartObject(10)
            b.PrependInt8Slot(0, t["scalar_type"], 0)
            b.PrependInt32Slot(1, 0, 0)
            b.PrependUOffsetTRelativeSlot(2, sizes, 0)
            b.PrependUOffsetTRelativeSlot(3, dim_order, 0)
            b.PrependUint32Slot(5, t["data_buffer_idx"], 0)
            if alloc is not None:
                b.PrependUOffsetTRelativeSlot(6, alloc, 0)
            b.PrependInt8Slot(8, t["dynamism"], 0)
            if eti is not None:
                b.PrependUOffsetTRelativeSlot(9, eti, 0)
            val = b.EndObject()
        elif k == "null":
            b.StartObject(0)
            val = b.EndObject()
        elif k == "int":
            b.StartObject(1)
            b.PrependInt64Slot(0, v.value, 0)
            val = b.EndObject()
        elif k == "bool":
            b.StartObject(1)
            b.PrependBoolSlot(0, v.value, False)
            val = b.EndObject()
        elif k == "double":
            b.StartObject(1)
            b.PrependFloat64Slot(0, v.value, 0.0)
            val = b.EndObject()
        elif k == "string":
            s = b.CreateString(v.value)
            b.StartObject(1)
            b.PrependUOffsetTRelativeSlot(0, s, 0)
            val = b.EndObject()
        elif k in ("int_list", "double_list", "bool_list", "tensor_list", "optional_tensor_list"):
            if k == "int_list":
                items = self._vec_i64(b, v.value)
            elif k == "double_list":
                b.StartVector(8, len(v.value), 8)
                for x in reversed(v.value):
                    b.PrependFloat64(x)
                items = b.EndVector()
            elif k == "bool_list":
                b.StartVector(1, len(v.value), 1)
                for x in reversed(v.value):
                    b.PrependBool(x)
                items = b.EndVector()
            else:
                items = self._vec_i32(b, v.value)
            b.StartObject(1)
            b.PrependUOffsetTRelativeSlot(0, items, 0)
            val = b.EndObject()
        else:
            raise ValueError(k)
        b.StartObject(2)
        b.PrependUint8Slot(0, _KT[k], 0)
        b.PrependUOffsetTRelativeSlot(1, val, 0)
        return b.EndObject()

    def _instr(self, b, ins: _Instr):
        if ins.kind in ("kernel", "delegate"):
            args = self._vec_i32(b, ins.b)
            b.StartObject(2)
            b.PrependInt32Slot(0, ins.a, -1)
            b.PrependUOffsetTRelativeSlot(1, args, 0)
            val = b.EndObject()
        elif ins.kind in ("move", "jump_false"):
            b.StartObject(2)
            b.PrependInt32Slot(0, ins.a, -1)
            b.PrependInt32Slot(1, ins.b, -1)
            val = b.EndObject()
        elif ins.kind == "free":
            b.StartObject(1)
            b.PrependInt32Slot(0, ins.a, -1)
            val = b.EndObject()
        else:
            raise ValueError(ins.kind)
        b.StartObject(2)
        b.PrependUint8Slot(0, _IA[ins.kind], 0)
        b.PrependUOffsetTRelativeSlot(1, val, 0)
        return b.EndObject()

    def _plan(self, b, m: MethodBuilder):
        name = b.CreateString(m.name)
        values = self._vec_offsets(b, [self._value(b, v) for v in m.values])
        inputs = self._vec_i32(b, m.inputs)
        outputs = self._vec_i32(b, m.outputs)
        instrs = self._vec_offsets(b, [self._instr(b, i) for i in m.instructions])
        e1, e2 = self._vec_i32(b, []), self._vec_i32(b, [])
        b.StartObject(4)
        b.PrependUOffsetTRelativeSlot(0, e1, 0)
        b.PrependUOffsetTRelativeSlot(1, e2, 0)
        b.PrependUOffsetTRelativeSlot(2, instrs, 0)
        chain = b.EndObject()
        chains = self._vec_offsets(b, [chain])
        ops = []
        for n, o in m.operators:
            sn, so = b.CreateString(n), b.CreateString(o)
            b.StartObject(2)
            b.PrependUOffsetTRelativeSlot(0, sn, 0)
            b.PrependUOffsetTRelativeSlot(1, so, 0)
            ops.append(b.EndObject())
        operators = self._vec_offsets(b, ops)
        dels = []
        for d in m.delegates:
            did = b.CreateString(d.backend_id)
            specs = []
            for k, v in d.compile_specs.items():
                ks = b.CreateString(k)
                vs = self._bytes(b, bytes(v), 1)
                b.StartObject(2)
                b.PrependUOffsetTRelativeSlot(0, ks, 0)
                b.PrependUOffsetTRelativeSlot(1, vs, 0)
                specs.append(b.EndObject())
            specv = self._vec_offsets(b, specs)
            b.StartObject(2)
            b.PrependInt8Slot(0, d.location, -1)   # force the field to be written
            b.PrependUint32Slot(1, d.index, 0xFFFFFFFF)
            ref = b.EndObject()
            b.StartObject(3)
            b.PrependUOffsetTRelativeSlot(0, did, 0)
            b.PrependUOffsetTRelativeSlot(1, ref, 0)
            b.PrependUOffsetTRelativeSlot(2, specv, 0)
            dels.append(b.EndObject())
        delegates = self._vec_offsets(b, dels)
        ncbs = self._vec_i64(b, m.non_const_buffer_sizes)
        b.StartObject(9)
        b.PrependUOffsetTRelativeSlot(0, name, 0)
        b.PrependUOffsetTRelativeSlot(2, values, 0)
        b.PrependUOffsetTRelativeSlot(3, inputs, 0)
        b.PrependUOffsetTRelativeSlot(4, outputs, 0)
        b.PrependUOffsetTRelativeSlot(5, chains, 0)
        b.PrependUOffsetTRelativeSlot(6, operators, 0)
        b.PrependUOffsetTRelativeSlot(7, delegates, 0)
        b.PrependUOffsetTRelativeSlot(8, ncbs, 0)
        return b.EndObject()

    def to_bytes(self) -> bytes:
        segments = list(self.segments)
        const_seg_idx = None
        const_offsets: list[int] = []
        if self.constants_mode == "segment" and len(self.constants) > 1:
            blob = b""
            for c in self.constants:
                blob += b"\0" * (_align(len(blob), 16) - len(blob))
                const_offsets.append(len(blob))
                blob += c
            const_offsets[0] = 0
            const_seg_idx = len(segments)
            segments.append(blob)

        b = flatbuffers.Builder(1024)
        plans = self._vec_offsets(b, [self._plan(b, m) for m in self.methods])
        cbuf = None
        if self.constants_mode == "inline" and len(self.constants) > 1:
            cbuf = self._byte_tables(b, self.constants)
        inline_v = self._byte_tables(b, self.inline_delegate_data)
        # segment offsets are relative to the segment base; each segment starts aligned
        seg_offsets, pos = [], 0
        for s in segments:
            pos = _align(pos, self.segment_alignment)
            seg_offsets.append(pos)
            pos += len(s)
        segs = []
        for off, s in zip(seg_offsets, segments):
            b.StartObject(2)
            b.PrependUint64Slot(0, off, 0xFFFFFFFFFFFFFFFF)
            b.PrependUint64Slot(1, len(s), 0xFFFFFFFFFFFFFFFF)
            segs.append(b.EndObject())
        segs_v = self._vec_offsets(b, segs)
        cs = None
        if const_seg_idx is not None:
            offs = self._vec_u64(b, const_offsets)
            b.StartObject(2)
            b.PrependUint32Slot(0, const_seg_idx, 0xFFFFFFFF)
            b.PrependUOffsetTRelativeSlot(1, offs, 0)
            cs = b.EndObject()
        b.StartObject(8)
        b.PrependUint32Slot(0, 0, 1)
        b.PrependUOffsetTRelativeSlot(1, plans, 0)
        if cbuf is not None:
            b.PrependUOffsetTRelativeSlot(2, cbuf, 0)
        b.PrependUOffsetTRelativeSlot(3, inline_v, 0)
        b.PrependUOffsetTRelativeSlot(4, segs_v, 0)
        if cs is not None:
            b.PrependUOffsetTRelativeSlot(5, cs, 0)
        root = b.EndObject()
        b.Finish(root, file_identifier=self.identifier)
        fb = bytes(b.Output())

        if not self.extended_header:
            if segments:
                raise ValueError("segments need the extended header")
            return fb
        hlen = 32
        program_size = len(fb) + hlen
        base = _align(program_size, self.segment_alignment) if segments else 0
        seg_data = pos if segments else 0
        header = b"eh00" + struct.pack("<IQQQ", hlen, program_size, base, seg_data)
        root_off = struct.unpack_from("<I", fb, 0)[0] + hlen
        out = bytearray(struct.pack("<I", root_off) + fb[4:8] + header + fb[8:])
        if segments:
            out += b"\0" * (base - len(out))
            for off, s in zip(seg_offsets, segments):
                out += b"\0" * (base + off - len(out))
                out += s
        return bytes(out)

    def save(self, path) -> str:
        data = self.to_bytes()
        with open(path, "wb") as f:
            f.write(data)
        return str(path)



def chain_pte(path, binary: bytes, n: int, width: int, factor: float = 0.5):
    """A .pte of `n` QNN delegates over copies of one context binary ([1, width] float32 in and
    out), each in its own segment as ExecuTorch lays them out, with `aten::mul.Scalar_out(factor)`
    on the CPU after each delegate."""
    b = PteBuilder()
    m = b.method("forward")
    x = m.tensor(np.float32, (1, width))
    h = x
    for _ in range(n):
        d = m.delegate("QnnBackend", segment=b.add_segment(qnn_wrap(binary)))
        y, z = m.tensor(np.float32, (1, width)), m.tensor(np.float32, (1, width))
        m.delegate_call(d, [h, y])
        m.kernel("aten::mul.Scalar_out", [y, m.double(factor), z, z])
        h = z
    m.inputs, m.outputs = [x], [h]
    b.save(path)
    return path
