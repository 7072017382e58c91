"""What plans read of a pool: the contexts it makes live, and a generation that says when the set
they found all live is still the same (then a plan skips acquire / release)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from qnnrt.core.call import LiveGraph


class LiveContext(Protocol):
    """What a plan reads of a live context: a `Context` here, a PD worker's context elsewhere."""
    @property
    def closed(self) -> bool: ...

    def graph(self, name: str) -> LiveGraph: ...


@dataclass(frozen=True)
class LiveContexts:
    """Contexts that were all live at `generation` (the pool bumps it on every change)."""
    generation: int
    contexts: Mapping[str, LiveContext]


class ContextSource(Protocol):
    """What plans ask of a pool (`ContextPool`, or the multi-PD pool of runtime/hosts/pd/fleet.py)."""

    @property
    def generation(self) -> int:
        """Bumped on every change to what is live."""

    def live_contexts(self, keys: Iterable[str]) -> LiveContexts | None: ...

    def set_order(self, order: list[str]) -> None: ...

    def acquire(self, key: str, position: int = 0) -> LiveContext: ...

    def release(self, key: str, position: int | None = None) -> None: ...
