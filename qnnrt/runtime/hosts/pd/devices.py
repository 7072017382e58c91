"""Which HTP device each PD opens, from what the backend reports (boards such as QCS9075 have two)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from qnnrt.core import Backend
from qnnrt.core.device_info import HtpDevice
from qnnrt.errors import QnnrtError


@dataclass(frozen=True)
class DevicePlacement:
    """Which HTP device each PD opens, from what the backend reports, and what was done."""
    devices: tuple[int, ...]     # device id per PD (PD 0 is the main process's: its backend's)
    cores_reported: int
    note: str
    arches: tuple[int | None, ...] = ()   # the HTP arch each device reports (selecting it needs one)


def place_on_devices(pds: int, reported: Sequence[HtpDevice] | None, why_not: str = "",
                     main_device: int = 0) -> DevicePlacement:
    """PDs spread over the HTP devices the backend reports, round robin from the main process's
    device (boards such as QCS9075 have two): each worker opens its device, so its PD and
    its contexts live there. Several cores of one device are reported only: a PD is per device."""
    if not reported:
        return DevicePlacement((main_device,) * pds, 0, f"the backend does not report its devices "
                               f"({why_not or 'none listed'}); every PD on the default device")
    cores = sum(max(1, d.cores) for d in reported)
    ids = [d.device_id for d in reported]
    if len(ids) == 1:
        more = f", {cores} cores (a PD is per device)" if cores > 1 else " with one core"
        return DevicePlacement((ids[0],) * pds, cores,
                               f"the backend reports one HTP device{more}: every PD on it")
    start = ids.index(main_device) if main_device in ids else 0
    chosen = [reported[(start + i) % len(ids)] for i in range(pds)]
    devices = tuple(d.device_id for d in chosen)
    where = ", ".join(f"PD {i} on device {d}" for i, d in enumerate(devices))
    return DevicePlacement(devices, cores, f"the backend reports {len(ids)} HTP devices "
                           f"({cores} cores in all): {where}", tuple(d.htp_arch for d in chosen))


def device_placement(backend: Backend, pds: int) -> DevicePlacement:
    """`place_on_devices` over what this backend reports."""
    from qnnrt.core.device_info import platform_info
    try:
        devs = platform_info(backend.lib)
    except QnnrtError as e:
        return place_on_devices(pds, None, str(e), backend.device_id)
    return place_on_devices(pds, devs, main_device=backend.device_id)
