"""Layouts of the HTP perf infrastructure, memory registration and spill-fill group structs (LP64),
from the C headers' layout rules (HTP/QnnHtpPerfInfrastructure.h, HTP/QnnHtpDevice.h, QnnMem.h,
HTP/QnnHtpContext.h). The perf payloads are also checked byte for byte against ExecuTorch's in
tests/runtime/test_perf_votes.py (shim log)."""
import ctypes as C

import pytest

from qnnrt._capi import htp_perf as H
from qnnrt._capi import types as T

SIZES = [(H.DcvsV3, 64), (H.PowerConfig, 68), (H.PerfInfrastructure, 32),
         (H.DeviceInfrastructure, 40), (T.MemShape, 24), (T.MemDescriptor, 48),
         (T.HtpGroupRegistration, 16), (T.HtpContextCustomConfig, 24), (T.HtpDeviceSignedPd, 8)]
OFFSETS = [(H.PowerConfig, "option", 0), (H.PowerConfig, "dcvsV3Config", 4),
           (H.PowerConfig, "rpcControlLatencyConfig", 4), (H.PowerConfig, "rpcPollingTimeConfig", 4),
           (H.DcvsV3, "contextId", 0), (H.DcvsV3, "powerMode", 12), (H.DcvsV3, "sleepLatency", 20),
           (H.DcvsV3, "busVoltageCornerMin", 36), (H.DcvsV3, "coreVoltageCornerMax", 60),
           (H.DeviceInfrastructure, "perfInfra", 8), (H.PerfInfrastructure, "setPowerConfig", 16),
           (T.MemDescriptor, "dataType", 24), (T.MemDescriptor, "memType", 28),
           (T.MemDescriptor, "ionFd", 32), (T.MemDescriptor, "dmaBufInfo", 32),
           (T.HtpContextCustomConfig, "groupRegistration", 8),
           (T.HtpGroupRegistration, "maxSpillFillBuffer", 8),
           (T.HtpDeviceSignedPd, "useSignedProcessDomain", 4),
           (T.HtpDeviceCustomConfigV1, "signedPd", 4), (T.HtpDeviceCustomConfigV2, "signedPd", 8)]


@pytest.mark.parametrize("struct,size", SIZES, ids=[s.__name__ for s, _ in SIZES])
def test_struct_sizes(struct, size):
    assert C.sizeof(struct) == size


@pytest.mark.parametrize("struct,field,offset", OFFSETS, ids=[f"{s.__name__}.{f}" for s, f, _ in OFFSETS])
def test_field_offsets(struct, field, offset):
    assert getattr(struct, field).offset == offset


def test_power_config_array_is_null_terminated_pointers():
    a, b = H.PowerConfig(option=2), H.PowerConfig(option=3)
    arr = H.power_config_array([a, b])
    assert len(arr) == 3 and not arr[2]
    assert C.addressof(arr[0].contents) == C.addressof(a) and arr[1].contents.option == 3


def test_a_fresh_power_config_is_all_zero_after_the_option():
    """The C++ runtimes value-initialise their configs; the bytes QNN sees must match theirs."""
    c = H.PowerConfig(option=H.POWER_CONFIG_RPC_CONTROL_LATENCY)
    c.rpcControlLatencyConfig = 100
    raw = bytes(C.string_at(C.addressof(c), C.sizeof(c)))
    assert raw[:8] == bytes.fromhex("0200000064000000") and raw[8:] == bytes(60)
