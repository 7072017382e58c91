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
from collections.abc import Sequence

from qnnrt.core.load_cache import FileIdentity
from qnnrt.errors import FormatError
from qnnrt.executorch import schema as S
from qnnrt.executorch.pte_constants import constant_method_value, is_constant_method
from qnnrt.executorch.pte_model import (QNN_BACKEND_ID, SCALAR_TYPE_NAMES, DelegateCall, ExtendedHeader,
                                        FreeCall, Instruction, JumpFalseCall, KernelCall, MoveCall, PteChain,
                                        PteDelegate, PteIOSpec, PteMethod, PteOperator, PteProgram,
                                        PteValue, QnnDelegateBlob, TensorInfo, numpy_to_scalar_type,
                                        scalar_type_to_numpy)
from qnnrt.executorch.pte_qnn import (_QNN_MAGIC, parse_qnn_compile_spec, qnn_context_binary,
                                      qnn_graph_io_order, unwrap_qnn_delegate)

# the .pte API in one place: the model (pte_model), QNN delegates (pte_qnn), constant methods
# (pte_constants) and reading (here)
__all__ = [
    "QNN_BACKEND_ID", "SCALAR_TYPE_NAMES", "scalar_type_to_numpy", "ExtendedHeader", "TensorInfo",
    "PteValue", "KernelCall", "DelegateCall", "MoveCall", "JumpFalseCall", "FreeCall", "PteOperator",
    "PteIOSpec", "PteDelegate", "PteChain", "PteMethod", "PteProgram", "QnnDelegateBlob", "read_pte",
    "unwrap_qnn_delegate", "qnn_context_binary", "qnn_graph_io_order", "parse_qnn_compile_spec",
    "is_pte_file", "numpy_to_scalar_type",
    "is_constant_method", "constant_method_value",
]

_EH_MAGIC = b"eh00"
_EH_MIN_LEN = 24          # magic + length + program size + segment base offset



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
        identity = FileIdentity.of(path, f.fileno())
        if size < 8:
            raise FormatError(f"{path}: the file has {size} bytes; an ExecuTorch program has at least "
                              "8 (root offset + 'ET12'). It is truncated or not a .pte file; copy or "
                              "re-export it.")
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise FormatError(f"{path}: cannot memory-map the file ({e})") from None
    try:
        prog = _parse(path, mm, size, require_qnn)
        prog.identity = identity
        return prog
    except FormatError:
        _close_quietly(mm)
        raise
    except Exception as e:   # never let a malformed file escape as a random Python error
        _close_quietly(mm)
        raise FormatError(f"{path}: malformed ExecuTorch program ({type(e).__name__}: {e}). The file "
                          "is damaged or not a .pte written by ExecuTorch; re-export it.") from e


def _close_quietly(mm: mmap.mmap) -> None:
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


def _parse(path: str, mm: mmap.mmap, size: int, require_qnn: bool) -> PteProgram:
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

    def io(indices: Sequence[int], prefix: str) -> list[PteIOSpec]:
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
