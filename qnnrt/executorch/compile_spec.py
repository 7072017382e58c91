"""The ``qnn_compile_spec`` of a QNN delegate: a QnnExecuTorchOptions flatbuffer
(backends/qualcomm/serialization/qc_compiler_spec.fbs in pytorch/executorch).

ExecuTorch writes its runtime options there (its HTP compiler-spec helper: "the only place to pass the
option to the runtime"), and its runtime acts on them: performance_mode (the HTP vote), pd_session
(signed / unsigned PD), shared_buffer (I/O in rpcmem), use_multi_contexts + max_sf_buf_size (one
spill-fill buffer for a group of contexts), profile_level, log_level. Field positions changed once:

- `1.1+` (1.1 .. 1.5 and main): graph_name was removed from the options (library_path 2, log_level 3,
  ..., shared_buffer 7) and skel_library_dir from the HTP options (use_conv_hmx 4, ...,
  use_multi_contexts 7, use_weight_sharing 8, use_slc_allocator 9 from 1.2).
- `0.5-1.0` (0.5 .. 1.0): graph_name 2, library_path 3, log_level 4, ..., shared_buffer 8;
  skel_library_dir 4, use_conv_hmx 5, ..., use_multi_contexts 8, use_weight_sharing 9.

The layout is recognised by checking each candidate's field types against the buffer (a string where
a string is, a bool 0/1, an enum in range); `1.1+` is tried first.
"""
from __future__ import annotations

import struct
from typing import Any

from qnnrt.errors import FormatError
from qnnrt.executorch import schema as S
from qnnrt.soc import name_of

BACKEND_TYPES = {0: "undefined", 1: "gpu", 2: "htp", 3: "dsp", 4: "lpai"}
PERFORMANCE_MODES = {0: "default", 1: "sustained_high_performance", 2: "burst",
                     3: "high_performance", 4: "power_saver", 5: "low_power_saver",
                     6: "high_power_saver", 7: "low_balanced", 8: "balanced"}
PRECISIONS = {0: "quantized", 1: "fp16"}
PD_SESSIONS = {0: "unsigned", 1: "signed"}
LOG_LEVELS = {0: "off", 1: "error", 2: "warn", 3: "info", 4: "verbose", 5: "debug"}
PROFILE_LEVELS = {0: "off", 1: "basic", 2: "detailed", 3: "optrace"}

# field name -> (slot, kind); kinds: bool, int, str, table, or an enum's value names
Fields = dict[str, tuple[int, Any]]
_OPTIONS_1_1: Fields = {
    "library_path": (2, "str"), "log_level": (3, LOG_LEVELS), "online_prepare": (4, "bool"),
    "dump_intermediate_outputs": (5, "bool"), "profile_level": (6, PROFILE_LEVELS),
    "shared_buffer": (7, "bool"), "is_from_context_binary": (8, "bool"), "saver": (9, "bool"),
    "saver_output_dir": (10, "str"), "op_package_options": (11, "table"), "use_mha2sha": (12, "bool"),
}
_HTP_1_1: Fields = {
    "max_sf_buf_size": (0, "int"), "performance_mode": (1, PERFORMANCE_MODES),
    "precision": (2, PRECISIONS), "pd_session": (3, PD_SESSIONS), "use_conv_hmx": (4, "bool"),
    "use_dlbc": (5, "bool"), "use_fold_relu": (6, "bool"), "use_multi_contexts": (7, "bool"),
    "use_weight_sharing": (8, "bool"), "use_slc_allocator": (9, "bool"),
}
_OPTIONS_0_5: Fields = {
    "library_path": (3, "str"), "log_level": (4, LOG_LEVELS), "online_prepare": (5, "bool"),
    "dump_intermediate_outputs": (6, "bool"), "profile_level": (7, PROFILE_LEVELS),
    "shared_buffer": (8, "bool"), "is_from_context_binary": (9, "bool"),
    "saver_output_dir": (11, "str"), "op_package_options": (12, "table"),
}
_HTP_0_5: Fields = {
    "max_sf_buf_size": (0, "int"), "performance_mode": (1, PERFORMANCE_MODES),
    "precision": (2, PRECISIONS), "pd_session": (3, PD_SESSIONS), "skel_library_dir": (4, "str"),
    "use_conv_hmx": (5, "bool"), "use_dlbc": (6, "bool"), "use_fold_relu": (7, "bool"),
    "use_multi_contexts": (8, "bool"), "use_weight_sharing": (9, "bool"),
}
LAYOUTS: dict[str, tuple[Fields, Fields]] = {"1.1+": (_OPTIONS_1_1, _HTP_1_1),
                                             "0.5-1.0": (_OPTIONS_0_5, _HTP_0_5)}
# what qnnrt's runtime acts on (the rest is shown by inspect)
RUNTIME_FIELDS = ("performance_mode", "pd_session", "shared_buffer", "use_multi_contexts",
                  "max_sf_buf_size", "profile_level", "log_level")


class _Mismatch(Exception):
    """A field's bytes do not fit the layout being tried."""


def _field(t: S.Table, slot: int, kind: Any) -> Any:
    if not t.has(slot):
        return None
    if kind == "bool":
        v = t.u8(slot)
        if v not in (0, 1):
            raise _Mismatch
        return bool(v)
    if kind == "int":
        return t.i32(slot)
    if kind == "str":
        s = t.string(slot)
        if s is None or "\0" in s:
            raise _Mismatch
        return s
    if kind == "table":
        return True if t.table(slot, S.Table, "table") is not None else None
    v = t.i32(slot)
    if v not in kind:
        raise _Mismatch
    return kind[v]


def _default(kind: Any) -> Any:
    """A flatbuffer field's value when absent (flatc omits defaults); None for strings."""
    if kind == "bool" or kind == "table":
        return False
    if kind == "int":
        return 0
    return None if kind == "str" else kind[0]


def _decode(t: S.Table | None, fields: Fields) -> dict:
    out: dict = {}
    if t is None:
        return out
    for name, (slot, kind) in fields.items():
        try:
            v = _field(t, slot, kind)
        except FormatError:
            raise _Mismatch from None
        v = _default(kind) if v is None else v
        if v is not None:
            out[name] = v
    return out


def parse_qnn_compile_spec(data: bytes) -> dict:
    """Decode a QnnExecuTorchOptions flatbuffer. Returns e.g. ``{"soc_model": "SM8650",
    "htp_arch": 75, "backend": "htp", "precision": "fp16", "performance_mode": "burst", ...,
    "layout": "1.1+"}``; an absent field has its schema default (flatc omits defaults: a missing
    performance_mode is `default`), absent tables give no fields. Never raises: undecodable data
    gives what could be read."""
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
        ho = None
        if bo is not None:
            out["backend"] = BACKEND_TYPES.get(bo.i32(0, 0), str(bo.i32(0, 0)))
            ho = bo.table(1, S.Table, "htp_options")
    except (FormatError, struct.error):
        return out
    for layout, (opt_fields, htp_fields) in LAYOUTS.items():
        try:
            decoded = {**_decode(root, opt_fields), **_decode(ho, htp_fields)}
        except _Mismatch:
            continue
        out.update(decoded)
        out["layout"] = layout
        return out
    out["layout"] = "unknown"
    return out


def runtime_options(specs: list[dict]) -> dict:
    """The runtime fields of a program's delegates, merged: a value several delegates disagree on
    is kept as the list of their values (the caller decides), one value as itself."""
    out: dict = {}
    for name in RUNTIME_FIELDS:
        values = [s[name] for s in specs if name in s]
        if not values:
            continue
        distinct = list(dict.fromkeys(values))
        out[name] = distinct[0] if len(distinct) == 1 else distinct
    return out
