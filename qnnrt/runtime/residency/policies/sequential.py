"""sequential: create, execute, free, one context at a time: the least PD a program can run in, at
one creation per graph call."""
from __future__ import annotations

from dataclasses import dataclass

from qnnrt.runtime.residency.policy import Bound, Residency, register


@register
@dataclass(frozen=True)
class Sequential(Residency):
    name = "sequential"
    free_after_use = True

    @property
    def bound(self) -> Bound:
        # a context is freed when its call is done; the bound evicts one left live otherwise
        # (e.g. by a re-creation) before the next creation
        return Bound(max_live=1)
