"""PDs in worker processes: a program whose contexts do not fit one PD keeps all of them resident,
the first group in this process's PD, each other group in a worker (runtime/hosts/pd/fleet.py). This kind
decides the placement (`choose_placement`) and holds the program when it spreads the contexts."""
from __future__ import annotations

from qnnrt.errors import QnnrtError
from qnnrt.runtime.hosts import HostRequest, OpenedHosts, Sizing
from qnnrt.runtime.residency.budget import Budget
from qnnrt.runtime.hosts.pd.placement import Placement, first_use_order, place
from qnnrt.runtime.performance import MULTI_PD_NO_SHARED_BUFFERS
from qnnrt.runtime.residency import Residency


def choose_placement(orders: dict[str, list[str]], keys: list[str], policy: Residency,
                     needs: dict[str, int | None], budget: Budget | None,
                     max_pds: int) -> Placement | None:
    """Multi-PD placement, as the policy's `spread` allows: forced (`multi-pd[:N]`), or chosen (`auto`)
    when the contexts do not fit one PD and fit at most `max_pds`; else None (one PD, in this process).
    `orders`: each runnable method's graph order; `keys`: every context."""
    spread = policy.spread
    if spread is None:
        return None
    order = first_use_order(orders, keys)
    if spread.forced:
        if budget is None:
            raise QnnrtError("multi-pd residency needs this backend's PD budget, which is not known "
                             "yet: give it with --pd-budget (or LoadOptions(pd_budget=...)), or run "
                             "once with --residency auto to learn it")
        return place(order, needs, budget.bytes, max(max_pds, spread.pds or 0), spread.pds,
                     budget.source)
    if (budget is None or max_pds < 2 or None in needs.values()
            or sum(v for v in needs.values() if v) <= budget.bytes):
        return None
    try:  # more PDs than allowed: max_pds PDs, each evicting what it cannot hold
        return place(order, needs, budget.bytes, max_pds, None, budget.source, evict=True)
    except QnnrtError:  # e.g. a context alone over the budget: one PD, which says so
        return None


class PdProcesses:
    name = "PD worker processes"

    def open(self, request: HostRequest, sizing: Sizing) -> OpenedHosts | None:
        o = request.options
        placement = choose_placement(request.orders, list(request.binaries), o.residency,
                                     sizing.needs, sizing.budget, request.max_pds)
        if placement is None:
            return None
        from qnnrt.runtime.hosts.pd.fleet import MultiPdPool
        performance = o.performance
        fleet = MultiPdPool(request.backend, request.binaries, placement, o)
        if performance is not None:
            performance.followers.append(fleet.vote)
            performance.no_shared_memory(MULTI_PD_NO_SHARED_BUFFERS)
        return OpenedHosts(fleet, fleet)


KIND = PdProcesses()
