"""Where a program's contexts live, as its plans see it: hosts, numbered. Host 0 is this process
(its own PD); host i > 0 is the worker process of PD i. A plan asks which host runs a context's
graphs, gets each graph's call object from its host (the same calling shape wherever it runs),
gets its planned buffers where every host can read them, and has another host run its part of the
plan as one step. `Program` and the plans know only this interface.

A kind of host is one module of this package with a `KIND` (a `HostKind`), listed in `KINDS`:
`open_hosts` asks each in turn whether it holds the program (the multi-PD kind when its placement
spreads the contexts, runtime/hosts/pd/kind.py), the last (this process alone,
runtime/hosts/this_process.py) always does. The PD budget and each context's predicted PD need,
which every kind sizes its pools by, are resolved here, once.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
from numpy.typing import DTypeLike

from qnnrt.core import Backend, ContextBinary, GraphSpec
from qnnrt.core.call import PreparedCall
from qnnrt.errors import FormatError, QnnrtError
from qnnrt.runtime.residency.budget import (DEFAULT_MAX_PDS, Budget, backend_identity, remember_budget,
                                           resolve_budget)
from qnnrt.runtime.recovery import RecoverablePool
from qnnrt.runtime.residency import ContextSource, Residency
from qnnrt.runtime.residency.groups import PoolOptions
from qnnrt.runtime.segments import Segment
from qnnrt.runtime.steps import SegmentStep

if TYPE_CHECKING:
    from qnnrt.runtime.plan_context import PlanContext

class Hosts(Protocol):
    def host_of(self, key: str) -> int:
        """0: context `key`'s graphs run in this process; i > 0: in the worker of PD i."""

    def bound_call(self, key: str, spec: GraphSpec) -> PreparedCall:
        """The prepared call a plan binds graph `spec` of context `key` through."""

    def buffer(self, shape: tuple, dtype: DTypeLike) -> np.ndarray:
        """A zeroed planned buffer every host reads and writes in place."""

    def segment_step(self, segment: Segment, template: list, context: PlanContext) -> SegmentStep:
        """The step that has `segment.host` run `segment` on one request."""

    def graph_calls_elsewhere(self) -> int:
        """Graph calls the other hosts made in plan segments, so far."""


class Pool(ContextSource, RecoverablePool, Protocol):
    """What a Program holds its contexts with: what plans and recovery ask, the policy, the
    summary (safe from any thread), and close."""
    residency: Residency

    @property
    def live_keys(self) -> list[str]: ...

    def summary(self) -> dict: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class HostRequest:
    """What opening a program's hosts needs: its contexts, the methods' call orders (a placement
    follows them), how to create the contexts, and the limits the user gave."""
    backend: Backend
    binaries: dict[str, ContextBinary]
    orders: dict[str, list[str]]          # each runnable method's graph order
    options: PoolOptions
    pd_budget: int | None = None          # bytes, given by the user (None: known or learned)
    max_pds: int = DEFAULT_MAX_PDS


@dataclass(frozen=True)
class Sizing:
    """The PD budget (None: not known yet), each context's predicted PD need (None where the binary
    does not tell), and what remembers a capacity a run found."""
    budget: Budget | None
    needs: dict[str, int | None]
    learned: Callable[[int], None]


@dataclass(frozen=True)
class OpenedHosts:
    """A program's pool and hosts (one object for a kind that is both), what the policy creates
    before the first call created."""
    pool: Pool
    hosts: Hosts


class HostKind(Protocol):
    name: str

    def open(self, request: HostRequest, sizing: Sizing) -> OpenedHosts | None:
        """The program's hosts of this kind, or None when this kind does not hold the program."""


# the kinds, tried in order; the last always holds the program
KINDS = ("qnnrt.runtime.hosts.pd.kind", "qnnrt.runtime.hosts.this_process")


def kinds() -> list[HostKind]:
    return [importlib.import_module(name).KIND for name in KINDS]


def predicted_needs(binaries: dict[str, ContextBinary]) -> dict[str, int | None]:
    """Each context's predicted PD need in bytes (None where the binary does not tell)."""
    out: dict[str, int | None] = {}
    for key, b in binaries.items():
        try:
            out[key] = b.pd_need().total
        except (FormatError, OSError):
            out[key] = None
    return out


def sizing(request: HostRequest) -> Sizing:
    backend = request.backend
    identity = backend_identity(backend.lib, backend.soc_model)
    return Sizing(resolve_budget(identity, request.pd_budget), predicted_needs(request.binaries),
                  lambda capacity: _remember(identity, capacity))


def _remember(identity: str, capacity: int) -> None:
    """A run found this backend's PD capacity: remember it for the next runs."""
    remember_budget(identity, capacity)


def open_hosts(request: HostRequest) -> OpenedHosts:
    """The first kind of host that holds the program, opened."""
    size = sizing(request)
    for kind in kinds():
        opened = kind.open(request, size)
        if opened is not None:
            return opened
    raise QnnrtError(f"no kind of host holds the program (kinds: {', '.join(KINDS)})")
