"""PowerVote: one HTP power config id, the votes made with it, and their release.

The HTP clocks are set by votes (DCVS v3: sleep latency, bus and core voltage corners; RPC control
latency and polling time) made through the perf infrastructure `deviceGetInfrastructure` returns.
A PowerVote owns one power config id: it votes at creation, can vote again (a per-run override), and
at close sets the down vote and destroys the id, once, whatever path closes it (Program.close, a
failed load, interpreter exit: the backend that adopted it closes it before freeing the device).
Each program has its own id, so closing one program never withdraws another program's vote.

What to vote is the caller's choice (runtime/performance.py): this module only carries it out and
records each call with QNN's answer. A refused call is recorded, never raised: a run never fails
because the accelerator would not change its clocks.
"""
from __future__ import annotations

import ctypes as C
import threading
from dataclasses import dataclass, fields

from qnnrt._capi import codes
from qnnrt._capi import htp_perf as H
from qnnrt.core.backend import Backend


@dataclass(frozen=True)
class Dcvs:
    """A DCVS v3 payload without its context id (the power config id is filled in at the call)."""
    set_dcvs_enable: int = 1
    dcvs_enable: int = 0
    power_mode: int = H.POWER_MODE_PERFORMANCE
    set_sleep_latency: int = 1
    sleep_latency_us: int = 0
    set_sleep_disable: int = 0
    sleep_disable: int = 0
    set_bus_params: int = 1
    bus_corner: int = 0       # min = target = max, as both runtimes vote
    set_core_params: int = 1
    core_corner: int = 0

    def config(self, power_config_id: int) -> H.PowerConfig:
        c = H.PowerConfig(option=H.POWER_CONFIG_DCVS_V3)
        d = c.dcvsV3Config
        d.contextId = power_config_id
        d.setDcvsEnable, d.dcvsEnable, d.powerMode = self.set_dcvs_enable, self.dcvs_enable, self.power_mode
        d.setSleepLatency, d.sleepLatency = self.set_sleep_latency, self.sleep_latency_us
        d.setSleepDisable, d.sleepDisable = self.set_sleep_disable, self.sleep_disable
        d.setBusParams = self.set_bus_params
        d.busVoltageCornerMin = d.busVoltageCornerTarget = d.busVoltageCornerMax = self.bus_corner
        d.setCoreParams = self.set_core_params
        d.coreVoltageCornerMin = d.coreVoltageCornerTarget = d.coreVoltageCornerMax = self.core_corner
        return c

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class VotePlan:
    """What to ask for: the up vote, the down vote made at release, and the RPC settings sent in one
    setPowerConfig after the up vote (None: not sent)."""
    up: Dcvs
    down: Dcvs
    rpc_control_latency_us: int | None = None
    rpc_polling_time_us: int | None = None


@dataclass
class VoteCall:
    """One call of the perf infrastructure and QNN's answer (0 = accepted)."""
    function: str
    what: str
    code: int

    @property
    def accepted(self) -> bool:
        return self.code == 0

    def as_dict(self) -> dict:
        return {"function": self.function, "what": self.what, "accepted": self.accepted,
                "code": self.code, "error": None if self.accepted else codes.error_name(self.code)}


def perf_infrastructure(backend: Backend) -> tuple[H.PerfFunctions | None, str]:
    """The backend's perf functions, or (None, why not)."""
    api = backend.api
    if not api.has("deviceGetInfrastructure"):
        return None, "the backend library has no deviceGetInfrastructure"
    p = C.c_void_p()
    rc = api.deviceGetInfrastructure(C.byref(p))
    if rc != 0 or not p.value:
        return None, f"deviceGetInfrastructure failed ({codes.error_name(codes.code_of(rc))})"
    infra = H.DeviceInfrastructure.from_address(p.value)
    if infra.infraType != H.INFRASTRUCTURE_TYPE_PERF:
        return None, f"the device infrastructure is of type {infra.infraType}, not perf (0)"
    fns = H.PerfFunctions(infra)
    if not fns.complete:
        return None, "the perf infrastructure lacks create / destroy / set power config"
    return fns, ""


class PowerVote:
    """Owns one power config id on `backend` (HTP device `device_id`, the backend's own by default,
    core `core_id`: 0 and 0 as in ExecuTorch and ONNX Runtime); votes `plan` at creation. See the
    module docstring."""

    def __init__(self, backend: Backend, plan: VotePlan, device_id: int | None = None, core_id: int = 0):
        self.backend = backend
        self.plan = plan
        self.calls: list[VoteCall] = []
        self.power_config_id = 0
        self.unavailable = ""          # why no vote could be made ('' when the id exists)
        self._lock = threading.Lock()
        self._closed = False
        fns, self.unavailable = perf_infrastructure(backend)
        if fns is None:
            self._closed = True
            return
        self._fns: H.PerfFunctions = fns
        if device_id is None:
            device_id = backend.device_id   # the device the backend opened
        pid = C.c_uint32(0)
        rc = codes.code_of(self._fns.create(device_id, core_id, C.byref(pid)))
        self.calls.append(VoteCall("createPowerConfigId", f"device {device_id} core {core_id}", rc))
        if rc != 0:
            self.unavailable = f"createPowerConfigId refused ({codes.error_name(rc)})"
            self._closed = True
            return
        self.power_config_id = pid.value
        backend.adopt(self)   # released before the device is freed, on every path
        self.vote(plan)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def active(self) -> bool:
        return not self._closed

    def _set(self, what: str, configs: list[H.PowerConfig]) -> int:
        arr = H.power_config_array(configs)
        rc = codes.code_of(self._fns.set(self.power_config_id, arr))
        self.calls.append(VoteCall("setPowerConfig", what, rc))
        return rc

    def vote(self, plan: VotePlan) -> None:
        """Vote `plan` (the up vote, then the RPC settings) with this id; the down vote at release
        becomes `plan.down`."""
        with self._lock:
            if self._closed:
                return
            self.plan = plan
            self._set("dcvs_v3 up", [plan.up.config(self.power_config_id)])
            rpc = []
            if plan.rpc_control_latency_us is not None:
                c = H.PowerConfig(option=H.POWER_CONFIG_RPC_CONTROL_LATENCY)
                c.rpcControlLatencyConfig = plan.rpc_control_latency_us
                rpc.append(c)
            if plan.rpc_polling_time_us is not None:
                c = H.PowerConfig(option=H.POWER_CONFIG_RPC_POLLING_TIME)
                c.rpcPollingTimeConfig = plan.rpc_polling_time_us
                rpc.append(c)
            if rpc:
                self._set("rpc " + ", ".join(
                    f"{n} {v} us" for n, v in (("control latency", plan.rpc_control_latency_us),
                                               ("polling time", plan.rpc_polling_time_us))
                    if v is not None), rpc)

    def close(self) -> None:
        """Down vote, then destroy the id. Idempotent; never raises (it runs during teardown)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._set("dcvs_v3 down", [self.plan.down.config(self.power_config_id)])
            finally:
                rc = codes.code_of(self._fns.destroy(self.power_config_id))
                self.calls.append(VoteCall("destroyPowerConfigId", f"id {self.power_config_id}", rc))

    def report(self) -> list[dict]:
        return [c.as_dict() for c in self.calls]

    def __enter__(self) -> PowerVote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PowerVote(id={self.power_config_id}, {'released' if self._closed else 'active'})"
