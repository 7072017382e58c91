"""eager: every context created at load and kept. What ExecuTorch and ONNX Runtime do: a program
that does not fit the PD fails at load, as it would in the field."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from qnnrt.runtime.residency.policy import Residency, register


@register
@dataclass(frozen=True)
class Eager(Residency):
    name = "eager"
    resident = True

    def preload(self, keys: Sequence[str]) -> list[str]:
        return list(keys)
