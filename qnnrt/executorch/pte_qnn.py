"""QNN delegates inside a ``.pte``: the context binary wrapped in ExecuTorch's
``QnnContextCustomProtocol`` header (format in :mod:`qnnrt.executorch.reader`), the order of a
graph's inputs and outputs, and the best-effort decode of the ``qnn_compile_spec``."""
from __future__ import annotations

import struct
from typing import Iterable

from qnnrt.errors import FormatError
from qnnrt.executorch import schema as S
from qnnrt.executorch.pte_model import QNN_BACKEND_ID, PteDelegate, QnnDelegateBlob
from qnnrt.soc import name_of

_QNN_MAGIC = 0x5678ABCD   # QnnContextCustomProtocol
_QNN_QCIR_MAGIC = 0x1234ABCD  # QnnQcirCustomProtocol (removed in ExecuTorch 1.0)
_QNN_HEADER_FIELDS = 20   # magic (4) + signature (8) + binary size (8)
_QNN_HEADER_PADDED = 256  # QNN_CTX_BIN_ALIGNMENT: header padded to 256 bytes since ExecuTorch 1.2



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


# QnnExecuTorchOptions (backends/qualcomm/serialization/qc_compiler_spec.fbs): only the leading fields
# whose positions are the same in every ExecuTorch release are decoded.
_QNN_BACKEND_TYPES = {0: "undefined", 1: "gpu", 2: "htp", 3: "dsp", 4: "lpai"}


def parse_qnn_compile_spec(delegate_or_bytes: PteDelegate | bytes | bytearray | memoryview) -> dict:
    """Best-effort decode of the ``qnn_compile_spec`` compile spec (a QnnExecuTorchOptions flatbuffer).

    Returns e.g. ``{"soc_model": "SM8650", "htp_arch": 75, "backend": "htp", "precision": "fp16"}``;
    unknown / undecodable fields are left out. Never raises.
    """
    if isinstance(delegate_or_bytes, PteDelegate):
        data = delegate_or_bytes.compile_specs.get("qnn_compile_spec", b"")
    else:
        data = bytes(delegate_or_bytes)
    out: dict = {}
    if len(data) < 8:
        return out
    try:
        root = S.Table(data, struct.unpack_from("<I", data, 0)[0], len(data), "qnn_compile_spec")
        soc = root.table(0, S.Table, "soc_info")
        if soc is not None:
            model = soc.i32(0, 0)
            out["soc_model"] = name_of(model) if model else "UNKNOWN_SM"
            htp = soc.table(1, S.Table, "htp_info")
            if htp is not None:
                out["htp_arch"] = htp.i32(0, 0)
                out["vtcm_mb"] = htp.u32(1, 0)
        bo = root.table(1, S.Table, "backend_options")
        if bo is not None:
            out["backend"] = _QNN_BACKEND_TYPES.get(bo.i32(0, 0), str(bo.i32(0, 0)))
            ho = bo.table(1, S.Table, "htp_options")
            if ho is not None:
                prec = ho.i32(2, 0)
                out["precision"] = {0: "quantized", 1: "fp16"}.get(prec, str(prec))
    except Exception:  # noqa: BLE001 - best effort by contract: what cannot be decoded is left out
        pass
    return out
