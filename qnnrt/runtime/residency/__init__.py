"""Context residency: which contexts are live, and when to create, evict and prefetch them.

policy.py says what a policy is and keeps the registry of the names `--residency` accepts;
policies/ holds the built-in ones, one module each:

- eager:      create every context at load; fail like the field does when the PD runs out
- lazy:       create on first use, keep
- bounded:K   at most K live (or `bounded:<bytes>` of PD estimates, e.g. bounded:2GB); evict the live
              context whose next use is farthest away, prefetch the next one on a background thread
- sequential: create, execute, free, one at a time
- auto:       lazy + prefetch; with a known PD budget (given, learned, or the simulator's) and each
              context's predicted PD need (core/pd_need.py) it evicts before creating, by bytes, so it
              never fails a creation; without one, until a creation fails for lack of PD / memory:
              then the capacity is QNN's "available space" + the live reservations (exact), evict, retry
- multi-pd[:N] every context resident over N PD worker processes (runtime/hosts/pd/fleet.py)

pool.py is the ContextPool that applies a policy; order.py the call order and farthest-next-use.
"""
from qnnrt.runtime.residency.order import CallOrder, farthest_next_use
from qnnrt.runtime.residency.policy import Bound, Residency, Spread, register
from qnnrt.runtime.residency import policies  # noqa: F401  (registers the built-in policies)
from qnnrt.runtime.residency.ledger import ResidencyStats
from qnnrt.runtime.residency.pool import ContextPool
from qnnrt.runtime.residency.sources import ContextSource, LiveContext, LiveContexts

__all__ = ["Bound", "CallOrder", "ContextPool", "ContextSource", "LiveContext",
           "LiveContexts", "Residency", "ResidencyStats", "Spread", "farthest_next_use", "register"]
