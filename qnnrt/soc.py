"""The one SoC table: name <-> QNN SoC model number <-> HTP arch <-> VTCM size.

QNN's `QNN_SOC_MODEL_*` numbers and ExecuTorch's `QcomChipset` values are the same integers, so one
number serves the device config, the compile options and the .pte compile spec. Sources: QNN's
"Supported Snapdragon devices" table and ExecuTorch's `qc_schema.py` (`_soc_info_table`).
"""
from __future__ import annotations

from dataclasses import dataclass

from qnnrt.errors import QnnrtError


@dataclass(frozen=True)
class Soc:
    name: str
    model: int              # QNN SoC model number == ExecuTorch QcomChipset value
    htp_arch: int | None    # Hexagon arch (73 = v73); None where not published
    vtcm_mb: int | None = None
    product: str = ""


SOCS: tuple[Soc, ...] = (
    Soc("SM8350", 30, 68, 4, "Snapdragon 888"),
    Soc("SM8450", 36, 69, 8, "Snapdragon 8 Gen 1"),
    Soc("SA8295", 39, 68, 8, "SA8295P (automotive)"),
    Soc("SM8475", 42, 69, 8, "Snapdragon 8+ Gen 1"),
    Soc("SM8550", 43, 73, 8, "Snapdragon 8 Gen 2"),
    Soc("SXR1230P", 45, 73, 2, "XR"),
    Soc("SSG2115P", 46, 73, 2, "Snapdragon AR"),
    Soc("SA8255", 52, 73, 8, "SA8255P (automotive)"),
    Soc("SXR2230P", 53, 69, 8, "XR2 Gen 2"),
    Soc("SM8650", 57, 75, 8, "Snapdragon 8 Gen 3"),
    Soc("SSG2125P", 58, 73, 2, "Snapdragon AR"),
    Soc("SC8380XP", 60, 73, 8, "Snapdragon X Elite"),
    Soc("SA8540", 62, 68, 8, "SA8540P (automotive)"),
    Soc("SM8635", 68, 73, 8, "Snapdragon 8s Gen 3"),
    Soc("SM8750", 69, 79, 8, "Snapdragon 8 Elite"),
    Soc("SM7675", 70, None, None, "Snapdragon 7+ Gen 3"),
    Soc("SA8797", 72, 81, 16, "SA8797P (automotive)"),
    Soc("SXR2330P", 75, 79, 8, "XR2+ Gen 2"),
    Soc("QCS9100", 77, 73, 8, "QCS9100 (IoT)"),
    Soc("SM8735", 85, 79, 8, "Snapdragon 8s Gen 4"),
    Soc("SM8850", 87, 81, 8, "Snapdragon 8 Elite Gen 5"),
    Soc("QCM6490", 93, 68, 2, "QCM6490 / QCS6490 (IoT)"),
    Soc("SAR2230P", 95, 81, 4, "AR1+ Gen 1"),
    Soc("SW6100", 96, 81, 4, "Snapdragon W5 Gen 2"),
    Soc("SM8845", 97, 81, 8, "Snapdragon 8 Gen 5"),
)
ALIASES = {"QCS6490": "QCM6490"}
DEFAULT = "SM8550"
# One HTP PD (protection domain) on the x86 simulator (QNN 2.51), measured: the only PD size known before
# a run (a device's is learned on it, runtime/residency/budget.py); `qnnrt convert --parts auto` sizes to it.
SIMULATOR_PD_CAPACITY = 3_650_722_201

BY_NAME = {s.name: s for s in SOCS}
BY_MODEL = {s.model: s for s in SOCS}


def by_name(name: str) -> Soc | None:
    key = name.strip().upper()
    return BY_NAME.get(ALIASES.get(key, key))


def by_model(model: int) -> Soc | None:
    return BY_MODEL.get(int(model))


def name_of(model: int | None) -> str:
    """'SM8550' for 43; the number as text for models the table does not name."""
    if model is None:
        return "unknown"
    s = by_model(model)
    return s.name if s else str(model)


def parse_soc(soc: str | int | None) -> int | None:
    """A SoC given as a number (43) or a name (SM8550) -> QNN SoC model number (None: not given)."""
    if soc is None or soc == "":
        return None
    if isinstance(soc, int) or str(soc).strip().isdigit():
        if not 0 < int(soc) < 1 << 32:
            raise QnnrtError(f"SoC model {soc} is out of range; QNN SoC model numbers are small "
                             f"positive integers (e.g. 43 for SM8550)")
        return int(soc)
    s = by_name(str(soc))
    if s is None:
        raise QnnrtError(f"unknown SoC {soc!r}; use a QNN SoC model number or one of "
                         f"{', '.join(sorted(BY_NAME))}")
    return s.model


def htp_arch_of(model: int | None) -> int | None:
    s = by_model(model) if model is not None else None
    return s.htp_arch if s else None
