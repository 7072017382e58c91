"""What a QNN backend says about itself and the device: API versions and build id, the platform
info the HTP reports (SoC model, Hexagon arch, VTCM) and whether DSP heap profiling is offered (the
PD capacity probe is runtime.pd_budget.probe_capacity). Used by `qnnrt doctor` (the CLI never
touches ctypes).

Header sources: QnnInterface.h (QnnInterface_t), QnnBackend.h (getBuildId, getApiVersion),
QnnDevice.h (QnnDevice_getPlatformInfo / freePlatformInfo, QnnDevice_HardwareDeviceInfoV1_t),
HTP/QnnHtpDevice.h (QnnHtpDevice_OnChipDeviceInfoExtension_t).
"""
from __future__ import annotations

import ctypes as C
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from qnnrt import soc as socs
from qnnrt._capi import codes
from qnnrt._capi import types as T
from qnnrt._capi.library import QnnLibrary
from qnnrt.core.backend import Backend, backend_build_id
from qnnrt.core.binary import ContextBinary
from qnnrt.core.freeing import check_free
from qnnrt.errors import QnnError, QnnrtError

if TYPE_CHECKING:
    from qnnrt.core.context import Context
    from qnnrt.core.shared_buffer import SharedMemory
    from qnnrt.core.tensor import TensorSpec


def _v(t: tuple[int, int, int]) -> str:
    return ".".join(map(str, t))


@dataclass
class ApiInfo:
    provider: str
    backend_id: int
    core_api: str
    htp_api: str
    system_api: str
    build_id: str
    reported_core_api: str | None    # backendGetApiVersion (may differ from the provider table)
    reported_htp_api: str | None

    def to_dict(self) -> dict:
        return asdict(self)


def api_info(lib: QnnLibrary) -> ApiInfo:
    reported_core = reported_htp = None
    v = T.ApiVersion()
    try:
        if lib.api.has("backendGetApiVersion") and lib.api.backendGetApiVersion(C.byref(v)) == 0:
            reported_core, reported_htp = _v(v.coreApiVersion.as_tuple()), _v(v.backendApiVersion.as_tuple())
    except Exception:  # noqa: BLE001 - a detail: the provider table has the versions too
        pass
    return ApiInfo(lib.provider_name, lib.backend_id, _v(lib.core_api), _v(lib.backend_api),
                   _v(lib.system_api), backend_build_id(lib), reported_core, reported_htp)


@dataclass
class HtpDevice:
    """One hardware device of QnnDevice_getPlatformInfo, with the HTP on-chip extension."""
    device_id: int
    device_type: int
    cores: int
    soc_model: int | None
    soc_name: str | None
    htp_arch: int | None
    vtcm_mb: int | None
    signed_pd: bool | None
    dlbc: bool | None

    def to_dict(self) -> dict:
        return asdict(self)


def platform_info(lib: QnnLibrary) -> list[HtpDevice]:
    """The devices the backend reports (no backend handle needed). Raises QnnrtError when the
    backend does not provide or fails QnnDevice_getPlatformInfo."""
    if not lib.api.has("deviceGetPlatformInfo"):
        raise QnnrtError(f"{lib.backend_path} does not provide QnnDevice_getPlatformInfo")
    pi = T.P(T.PlatformInfo)()
    rc = lib.api.deviceGetPlatformInfo(None, C.byref(pi))
    if rc != 0 or not pi:
        code = codes.code_of(rc)
        raise QnnrtError(f"QnnDevice_getPlatformInfo failed with QNN error {code} "
                         f"({codes.error_name(code)}) {lib.error_message(rc)}".rstrip())
    out = []
    try:
        info = pi.contents.v1
        for i in range(info.numHwDevices):
            d = info.hwDevices[i].v1
            model = arch = vtcm = signed = dlbc = None
            if d.deviceInfoExtension:
                e = d.deviceInfoExtension.contents.onChipDevice
                model, arch, vtcm = int(e.socModel), int(e.arch), int(e.vtcmSize)
                signed, dlbc = bool(e.signedPdSupport), bool(e.dlbcSupport)
            s = socs.BY_MODEL.get(model) if model is not None else None
            out.append(HtpDevice(int(d.deviceId), int(d.deviceType), int(d.numCores), model,
                                 s.name if s else None, arch or None, vtcm, signed, dlbc))
    finally:
        if lib.api.has("deviceFreePlatformInfo"):
            check_free(lib.api.deviceFreePlatformInfo(None, pi), "deviceFreePlatformInfo", "the platform info")
    return out


def dsp_heap_profiling_offered(backend: Backend, binary: ContextBinary) -> bool:
    """Does the backend accept HTP context option 4 (DSP memory profiling)? One context is created
    with it (and freed): error 1000 means no (the x86 simulator), success yes. Other errors raise."""
    from qnnrt.core.context import Context
    try:
        Context(backend, binary, name="doctor", dsp_memory_profiling=True).close()
    except QnnError as e:
        if e.is_not_supported:
            return False
        raise
    return True


def _probe_shared_buffer(memory: SharedMemory, context: Context, spec: TensorSpec) -> dict:
    """Register one rpcmem buffer for `spec` with `context`, then free it."""
    try:
        handle = memory.mem_handle(context, memory.array(tuple(spec.shape), spec.dtype, spec.name),
                                   spec)
    finally:
        memory.close()
    if handle is None:
        return {"offered": False, "detail": memory.refused}
    return {"offered": True, "detail": f"an rpcmem buffer was registered ({memory.library})"}


def performance_features_offered(backend: Backend, binary: ContextBinary | None) -> dict[str, dict]:
    """Which of HTP performance votes, shared buffers and spill-fill groups this backend offers, each
    {"offered": bool | None, "detail": str}, found by trying: a burst vote made and released, one
    shared buffer registered with a test context, one context created as a spill-fill group
    (None: not tried, no test binary)."""
    from qnnrt.core.context import Context
    from qnnrt.core.perf import Dcvs, PowerVote, VotePlan
    from qnnrt.core.shared_buffer import SharedMemory
    from qnnrt.core.spill_fill import SpillFillGroup
    out: dict[str, dict] = {}
    probe = VotePlan(Dcvs(sleep_latency_us=40, bus_corner=0xA0, core_corner=0xA0),
                     Dcvs(dcvs_enable=1, power_mode=0x4, sleep_latency_us=2000, bus_corner=0x30,
                          core_corner=0x30))
    with PowerVote(backend, probe) as vote:
        pass
    refused = [c for c in vote.calls if not c.accepted]
    out["performance votes"] = {
        "offered": not vote.unavailable and not refused,
        "detail": vote.unavailable or ("; ".join(f"{c.function} ({c.what}) refused: {c.as_dict()['error']}"
                                               for c in refused) or
                                       f"{len(vote.calls)} perf-infrastructure calls accepted "
                                       f"(create, DCVS v3 up, down, destroy)")}
    ok, why = SharedMemory.available()
    out["shared buffers"] = {"offered": ok if not ok or binary is None else None, "detail": why}
    if binary is None:
        out["spill-fill groups"] = {"offered": None, "detail": "not tried: no test binary"}
        if ok:
            out["shared buffers"]["detail"] = "libcdsprpc found; not registered: no test binary"
        return out
    group = SpillFillGroup(max(g.spill_fill_size for g in binary.graphs) or 1 << 20)
    ctx = Context(backend, binary, name="doctor-group", spill_fill_group=group)
    try:
        if ok:
            out["shared buffers"] = _probe_shared_buffer(SharedMemory(backend), ctx,
                                                         binary.graphs[0].inputs[0])
    finally:
        ctx.close()
    out["spill-fill groups"] = {"offered": group.usable,
                                "detail": group.refused or "a context was registered as a group"}
    return out
