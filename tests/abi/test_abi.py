"""Struct sizes and offsets against the layouts the real QNN 2.51 libraries accept (LP64).

The numbers come from the C headers (sizeof/offsetof printed by a C program against the public QNN
headers) and, for the HTP device config, from what libQnnHtp 5.51 reads (its union moved to offset 8).
"""
import ctypes as C

import pytest

from qnnrt._capi import functions as F
from qnnrt._capi import types as T

SIZES = {
    F.InterfaceProvider: None,  # checked via the slot count below
    T.QuantizeParams: 40, T.TensorV1: 112, T.TensorV2: 136, T.Tensor: 144,
    T.Scalar: 16, T.ContextConfig: 16, T.HtpContextCustomConfig: 24, T.DeviceConfig: 16,
    T.HtpDeviceCustomConfigV1: 12, T.HtpDeviceCustomConfigV2: 16,
    T.ProfileEventData: 24, T.ProfileExtendedEventData: 56, T.GraphInfo: 88,
    T.BinaryInfo: 144, T.BinaryInfoV1: 128, T.BinaryInfoV2: 136, T.BinaryInfoV3: 136,
    T.Version: 12, T.ApiVersion: 24, T.ClientBuffer: 16,
    T.MemDescriptor: 48, T.HtpMemDescriptor: 32, T.HtpSharedBufferConfig: 16,
}

OFFSETS = [
    (T.TensorV2, "quantizeParams", 32), (T.TensorV2, "rank", 72), (T.TensorV2, "dimensions", 80),
    (T.TensorV2, "memType", 88), (T.TensorV2, "d", 96), (T.TensorV2, "isDynamicDimensions", 112),
    (T.TensorV2, "sparseParams", 120), (T.TensorV2, "isProduced", 132),
    (T.BinaryInfoV3, "graphs", 96), (T.BinaryInfoV3, "socModel", 128),
    (T.BinaryInfoV1, "graphs", 120), (T.HtpDeviceCustomConfigV1, "u", 4),
    (T.HtpDeviceCustomConfigV2, "u", 8), (T.GraphInfoV3, "startOpIndex", 72),
    (T.ProfileExtendedEventDataV1, "timestamp", 32),
    (T.MemDescriptor, "memType", 28), (T.MemDescriptor, "u", 32),
    (T.HtpMemDescriptor, "size", 8), (T.HtpMemDescriptor, "u", 16), (T.HtpSharedBufferConfig, "offset", 8),
]


@pytest.mark.parametrize("struct,size", [(k, v) for k, v in SIZES.items() if v is not None],
                         ids=lambda x: getattr(x, "__name__", str(x)))
def test_struct_sizes(struct, size):
    assert C.sizeof(struct) == size


@pytest.mark.parametrize("struct,field,offset", OFFSETS,
                         ids=[f"{s.__name__}.{f}" for s, f, _ in OFFSETS])
def test_field_offsets(struct, field, offset):
    assert getattr(struct, field).offset == offset


def test_provider_tables():
    # QnnInterface_t: 608 bytes with 71 slots; the table starts at offset 40
    assert len(F.INTERFACE_SLOTS) == 71 and len(F.SYSTEM_SLOTS) == 16
    assert C.sizeof(F.InterfaceProvider) == 608
    assert F.InterfaceProvider.functions.offset == 40
    assert C.sizeof(F.SystemInterfaceProvider) == 160
    assert F.SystemInterfaceProvider.functions.offset == 32


def test_real_library_versions_and_device_layout():
    from qnnrt.core import Backend
    with Backend() as be:
        assert be.lib.core_api[0] == 2 and be.lib.backend_api[0] == 5
        assert be.lib.provider_name == "HTP_QTI_AISW"
        # 5.51 reads socModel at offset 8: the V2 layout must be chosen for it
        if be.lib.backend_api[1] >= 51:
            assert be.device_config_type() is T.HtpDeviceCustomConfigV2


def test_device_config_with_soc_accepted_by_library():
    from qnnrt.core import Backend
    with Backend(soc="SM8550") as be:  # a wrong layout makes deviceCreate fail with 14001
        assert be.device


def test_unknown_api_major_refused(monkeypatch):
    from qnnrt._capi import library
    from qnnrt.errors import QnnrtError
    monkeypatch.setattr(library, "SUPPORTED_CORE_API_MAJOR", 3)
    monkeypatch.setattr(library, "_libraries", {})
    with pytest.raises(QnnrtError, match="core API"):
        library.open_library()


@pytest.mark.parametrize("table", [F.QnnInterface, F.QnnSystemInterface], ids=lambda t: t.__name__)
def test_declared_tables_match_their_signatures(table):
    """Every slot qnnrt gives a C signature is declared for mypy with the same arity, and nothing
    else is: a call mypy accepts is a call the table can make."""
    import typing
    declared = {k: v for k, v in typing.get_type_hints(table).items() if k != "SIGNATURES"}
    assert set(declared) == set(table.SIGNATURES)
    for name, hint in declared.items():
        params, _ = typing.get_args(hint)
        assert len(params) == len(table.SIGNATURES[name]), name


def test_a_null_slot_is_a_clear_error():
    from qnnrt.errors import QnnrtError
    api = F.QnnInterface(F.INTERFACE_SLOTS, [0] * len(F.INTERFACE_SLOTS), "libNull.so")
    assert not api.has("contextFree")
    with pytest.raises(QnnrtError, match="libNull.so does not provide contextFree"):
        api.contextFree(None, None)
