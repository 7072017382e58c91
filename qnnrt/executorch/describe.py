"""`describe_pte`: a JSON-able summary of a ``.pte`` program for ``qnnrt inspect`` (methods,
instructions, CPU operators, delegates and the context binaries they share)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from qnnrt.errors import FormatError
from qnnrt.executorch import kernels as K
from qnnrt.executorch.instructions import KINDS, kind_of
from qnnrt.executorch.reader import (KernelCall, PteIOSpec, PteMethod, PteProgram, QnnDelegateBlob,
                                     constant_method_value, is_constant_method, parse_qnn_compile_spec,
                                     unwrap_qnn_delegate)

__all__ = ["describe_pte", "qnn_graph_lister"]



def _io(specs: Sequence[PteIOSpec]) -> list[dict]:
    out = []
    for s in specs:
        d: dict[str, Any] = {"name": s.name, "value_index": s.value_index, "kind": s.kind}
        if s.kind == "tensor" and s.shape is not None and s.tensor is not None:
            d["shape"] = list(s.shape)
            d["dtype"] = s.dtype.name if s.dtype is not None else s.tensor.scalar_type_name
            if s.tensor.shape_dynamism:
                d["dynamic"] = ["static", "bounded", "unbounded"][s.tensor.shape_dynamism]
        out.append(d)
    return out


def qnn_graph_lister(backend_lib: str | None = None) -> Callable[[memoryview], list[dict]] | None:
    """A ``graph_lister`` for :func:`describe_pte` reading graphs through the QNN System API
    (``qnnrt.core.ContextBinary``); None when qnnrt.core / the QNN libraries are unavailable."""
    try:
        from qnnrt.core import ContextBinary
    except ImportError:
        return None

    def lister(binary: memoryview) -> list[dict]:
        cb = ContextBinary(buffer=binary, name="pte delegate", backend_lib=backend_lib)
        try:
            return [g.to_dict() for g in cb.graphs]
        finally:
            cb.close()
    return lister


def describe_pte(program: PteProgram,
                 graph_lister: Callable[[memoryview], list] | None = None) -> dict:
    """A JSON-able summary of a ``.pte`` program for ``qnnrt inspect``.

    ``graph_lister(context_binary) -> [graph names or dicts]`` fills each context's ``graphs``
    (:func:`qnn_graph_lister` reads them through the QNN System API). Without it, the graph each
    method runs is still given (ExecuTorch's QNN backend runs the graph named after the method).
    Never raises for a delegate it cannot unwrap: the problem is reported in that entry's ``error``.
    """
    contexts: dict[tuple[str, int], dict] = {}
    methods = []
    missing_all: dict[str, None] = {}
    non_qnn = []
    for m in program.methods.values():
        counts, ops = _instruction_counts(m)
        for nm in K.missing_operators(ops):
            missing_all.setdefault(nm, None)
        const_bytes = sum(v.value.nbytes for v in m.values
                          if v.kind == "tensor" and v.value.is_constant)
        delegates = []
        for d in m.delegates:
            key = f"{d.location.lower()}:{d.data_index}"
            e = {"index": d.index, "backend_id": d.backend_id, "location": d.location,
                 "data_index": d.data_index, "key": key, "size": d.size,
                 "file_offset": d.file_offset, "graph": m.graph_name(d.index)}
            if d.is_qnn:
                try:
                    q = unwrap_qnn_delegate(d)
                    e.update(wrapper=q.wrapper, context_binary_size=len(q.binary),
                             signature=q.signature, found=q.description)
                except FormatError as err:
                    q = None
                    e["error"] = str(err)
                spec = parse_qnn_compile_spec(d)
                if spec:
                    e["compile_spec"] = spec
                ctx = contexts.get((d.location, d.data_index))
                if ctx is None:
                    ctx = contexts[(d.location, d.data_index)] = _context_entry(
                        key, d.size, None if q is None else len(q.binary), q, graph_lister)
                ctx["used_by"].append(f"{m.name}.delegates[{d.index}]")
                if e["graph"] not in ctx["graphs_used"]:
                    ctx["graphs_used"].append(e["graph"])
            else:
                non_qnn.append(f"{m.name}.delegates[{d.index}] ({d.backend_id})")
            delegates.append(e)
        entry: dict[str, Any] = {}
        if is_constant_method(m):
            v = constant_method_value(m)
            entry["constant"] = v.tolist() if isinstance(v, np.ndarray) else v
        methods.append({**entry,
            "name": m.name, "inputs": _io(m.inputs), "outputs": _io(m.outputs),
            "instructions": counts, "delegate_call_order": m.delegate_call_order(),
            "cpu_operators": [{"name": k, "calls": v, "implemented": k in K.KERNELS}
                              for k, v in ops.items()],
            "delegates": delegates, "constant_bytes": const_bytes,
            "non_const_buffer_sizes": list(m.non_const_buffer_sizes),
        })
    h = program.header
    return {
        "format": "executorch-pte",
        "path": program.path,
        "file_size": program.file_size,
        "schema_version": program.version,
        "extended_header": None if h is None else {
            "length": h.length, "program_size": h.program_size,
            "segment_base_offset": h.segment_base_offset, "segment_data_size": h.segment_data_size},
        "segments": [{"index": i, "offset": o, "size": s} for i, (o, s) in enumerate(program.segments)],
        "methods": methods,
        "contexts": list(contexts.values()),
        "missing_operators": list(missing_all),
        "non_qnn_delegates": non_qnn,
    }

def _instruction_counts(m: PteMethod) -> tuple[dict[str, int], dict[str, int]]:
    """Instructions per kind, and calls per CPU operator, of method `m`."""
    counts = {"total": len(m.instructions), **{k.counter: 0 for k in KINDS.values()}}
    ops: dict[str, int] = {}
    for ins in m.instructions:
        counts[kind_of(ins).counter] += 1
        if isinstance(ins, KernelCall):
            nm = m.operators[ins.op_index].qualified_name
            ops[nm] = ops.get(nm, 0) + 1
    return counts, ops


def _context_entry(key: str, size: int, binary_size: int | None, q: QnnDelegateBlob | None,
                   graph_lister: Callable[[memoryview], list] | None) -> dict[str, Any]:
    """The `contexts` entry of the first delegate naming a context binary."""
    ctx: dict[str, Any] = {"key": key, "size": size, "context_binary_size": binary_size,
                           "used_by": [], "graphs_used": []}
    if q is not None and graph_lister is not None:
        try:
            ctx["graphs"] = list(graph_lister(q.binary))
        except Exception as err:  # noqa: BLE001 - listing is informative only
            ctx["graphs_error"] = str(err)
    return ctx
