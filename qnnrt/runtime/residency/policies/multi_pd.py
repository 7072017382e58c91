"""multi-pd[:N]: every context resident, spread over N PDs (as many as the placement needs without
N), one per process: runtime/hosts/pd/placement.py `place` splits them, runtime/hosts/pd/fleet.py runs them. Parsed and
registered like every policy; in a single pool it keeps the lazy defaults."""
from __future__ import annotations

from dataclasses import dataclass

from qnnrt.errors import QnnrtError
from qnnrt.runtime.residency.policy import Residency, Spread, register, whole_number


@register
@dataclass(frozen=True)
class MultiPd(Residency):
    name = "multi-pd"
    usage = "multi-pd[:N]"
    pds: int | None = None

    def __post_init__(self) -> None:
        if self.pds is not None and self.pds < 1:
            raise QnnrtError(f"residency multi-pd:{self.pds}: N must be a whole number >= 1")

    @classmethod
    def from_argument(cls, arg: str | None, text: str) -> MultiPd:
        return cls() if arg is None else cls(pds=whole_number(arg, text, "N"))

    def __str__(self) -> str:
        return f"multi-pd:{self.pds}" if self.pds else "multi-pd"

    @property
    def spread(self) -> Spread:
        return Spread(forced=True, pds=self.pds)
