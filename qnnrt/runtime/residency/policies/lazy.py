"""lazy: a context is created at its first use and kept (the base policy's defaults): a method that
never runs costs no PD, and nothing is ever evicted."""
from __future__ import annotations

from dataclasses import dataclass

from qnnrt.runtime.residency.policy import Residency, register


@register
@dataclass(frozen=True)
class Lazy(Residency):
    name = "lazy"
