"""The HTP performance infrastructure ABI (HTP/QnnHtpDevice.h, HTP/QnnHtpPerfInfrastructure.h).

`deviceGetInfrastructure` hands out a pointer to a QnnHtpDevice_Infrastructure_t: an infra type
(0 = perf) and, at offset 8, four function pointers (create / destroy a power config id, set power
configs, set memory configs). A power config is an option number and a union whose largest member
is the DCVS v3 payload (16 x u32), so one config is 68 bytes; `setPowerConfig` takes a
NULL-terminated array of pointers to them. Layouts are pinned in tests/abi/test_htp_perf_abi.py.
No lifetimes here: core/perf.py owns the power config id.
"""
from __future__ import annotations

import ctypes as C
from typing import Any

from qnnrt._capi.types import ErrorHandle, P, u32, vp

INFRASTRUCTURE_TYPE_PERF = 0

# QnnHtpPerfInfrastructure_PowerConfigOption_t
POWER_CONFIG_DCVS_V3 = 1
POWER_CONFIG_RPC_CONTROL_LATENCY = 2
POWER_CONFIG_RPC_POLLING_TIME = 3
MAX_RPC_POLLING_TIME_US = 9999   # QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIG_MAX_RPC_POLLING_TIME

# QnnHtpPerfInfrastructure_PowerMode_t
POWER_MODE_ADJUST_UP_DOWN = 0x1
POWER_MODE_POWER_SAVER = 0x4
POWER_MODE_PERFORMANCE = 0x10

# QnnHtpPerfInfrastructure_VoltageCorner_t (maps to HAP_DCVS_VCORNER_*)
VOLTAGE_CORNERS = {
    "DISABLE": 0x10, "MIN": 0x20, "SVS2": 0x30, "SVS": 0x40, "SVS_PLUS": 0x50, "NOM": 0x60,
    "NOM_PLUS": 0x70, "TURBO": 0x80, "TURBO_PLUS": 0x90, "TURBO_L2": 0x92, "TURBO_L3": 0x93,
    "MAX": 0xA0,
}


class DcvsV3(C.Structure):
    """QnnHtpPerfInfrastructure_DcvsV3_t: each `set*` flag makes the value after it count."""
    _fields_ = [("contextId", u32), ("setDcvsEnable", u32), ("dcvsEnable", u32),
                ("powerMode", u32), ("setSleepLatency", u32), ("sleepLatency", u32),
                ("setSleepDisable", u32), ("sleepDisable", u32), ("setBusParams", u32),
                ("busVoltageCornerMin", u32), ("busVoltageCornerTarget", u32),
                ("busVoltageCornerMax", u32), ("setCoreParams", u32),
                ("coreVoltageCornerMin", u32), ("coreVoltageCornerTarget", u32),
                ("coreVoltageCornerMax", u32)]


class HmxV2(C.Structure):
    """QnnHtpPerfInfrastructure_HmxV2_t (in the union only for its size; qnnrt does not vote it)."""
    _fields_ = [("hmxPickDefault", u32), ("hmxVoltageCornerMin", u32),
                ("hmxVoltageCornerTarget", u32), ("hmxVoltageCornerMax", u32), ("hmxPerfMode", u32)]


class _PowerConfigUnion(C.Union):
    _fields_ = [("dcvsV3Config", DcvsV3), ("rpcControlLatencyConfig", u32),
                ("rpcPollingTimeConfig", u32), ("hmxTimeoutIntervalUsConfig", u32),
                ("hmxV2Config", HmxV2), ("adaptivePollingTimeConfig", u32),
                ("ddrPerfModeConfig", u32)]


class PowerConfig(C.Structure):
    """QnnHtpPerfInfrastructure_PowerConfig_t. Made zeroed, as the C++ runtimes value-initialise it,
    so the bytes QNN receives are the same as theirs."""
    _anonymous_ = ("u",)
    _fields_ = [("option", u32), ("u", _PowerConfigUnion)]


CREATE_POWER_CONFIG_ID = C.CFUNCTYPE(ErrorHandle, u32, u32, P(u32))
DESTROY_POWER_CONFIG_ID = C.CFUNCTYPE(ErrorHandle, u32)
SET_POWER_CONFIG = C.CFUNCTYPE(ErrorHandle, u32, P(P(PowerConfig)))


class PerfInfrastructure(C.Structure):
    """QnnHtpDevice_PerfInfrastructure_t: the four entry points, as raw pointers."""
    _fields_ = [("createPowerConfigId", vp), ("destroyPowerConfigId", vp),
                ("setPowerConfig", vp), ("setMemoryConfig", vp)]


class DeviceInfrastructure(C.Structure):
    """QnnHtpDevice_Infrastructure_t: infra type, then the perf table at offset 8."""
    _fields_ = [("infraType", u32), ("perfInfra", PerfInfrastructure)]


def power_config_array(configs: list[PowerConfig]) -> C.Array:
    """The `const PowerConfig**` argument: pointers to `configs` and a NULL (kept alive by the
    caller together with `configs`)."""
    arr = (P(PowerConfig) * (len(configs) + 1))()
    for i, c in enumerate(configs):
        arr[i] = C.pointer(c)
    return arr


class PerfFunctions:
    """Callables for a perf infrastructure table (each returns the raw error handle); a NULL entry
    is None, and the caller says the infrastructure is unavailable."""

    def __init__(self, infra: DeviceInfrastructure):
        t = infra.perfInfra
        self.create: Any
        self.destroy: Any
        self.set: Any
        self.create = CREATE_POWER_CONFIG_ID(t.createPowerConfigId) if t.createPowerConfigId else None
        self.destroy = (DESTROY_POWER_CONFIG_ID(t.destroyPowerConfigId)
                        if t.destroyPowerConfigId else None)
        self.set = SET_POWER_CONFIG(t.setPowerConfig) if t.setPowerConfig else None

    @property
    def complete(self) -> bool:
        return None not in (self.create, self.destroy, self.set)
