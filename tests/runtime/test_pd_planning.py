"""Residency planned by predicted PD bytes: the budget learned once, then never a failed creation."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import qnnrt
from qnnrt.core import Backend, ContextBinary
from qnnrt.profiling.pd_log import pd_available_from_log, pd_estimate_from_log, pd_reserved_from_log
from qnnrt.runtime.residency.budget import SIMULATOR_CAPACITY, cache_file
from qnnrt.runtime.hosts.pd.placement import belady_creations, plan
from qnnrt.runtime.residency import ContextPool
from tests.helpers.qnn_fixtures import WIDTH

X = np.linspace(-2, 2, WIDTH, dtype=np.float32)[None]


def run(model, residency="auto", iterations=2, **options):
    with qnnrt.load(model, residency=residency, options=qnnrt.LoadOptions(**options)) as prog:
        for _ in range(iterations):
            prog.run(None, {"x": X})
        return prog.pool.summary()


def _a_device(monkeypatch) -> None:
    """The backend's PD budget is not known before a run (as on a device)."""
    from qnnrt.runtime.residency import budget as pd_budget
    monkeypatch.setattr(pd_budget, "known_budget", lambda identity: None)


def test_auto_plans_with_the_simulators_budget_from_the_first_run(chain_pd):
    """On the simulator the budget is known: even a fresh cache's first run never fails a creation."""
    from qnnrt.cli.inspect_pd import describe_pd
    d = describe_pd(Path(chain_pd.model))
    assert d["eager_fits"] is False and d["budget_source"] == "simulator"
    s = run(chain_pd.model, max_pds=1, iterations=1)   # one PD: auto evicts
    assert s["create_failures"] == 0 and s["pd_failures_handled"] == 0 and s["evictions"] > 0
    assert s["pd_budget_source"] == "simulator" and s["pd_budget_bytes"] == SIMULATOR_CAPACITY
    assert s["pd_peak_predicted_bytes"] <= SIMULATOR_CAPACITY


def test_auto_learns_the_budget_once_then_never_fails(chain_pd, monkeypatch):
    """Where the budget is unknown (a device): the first auto run finds exactly it (one 1002),
    inspect --pd then names it, the second run plans with it: zero failed creations, the same
    evictions."""
    from qnnrt.cli.inspect_pd import describe_pd
    _a_device(monkeypatch)
    assert describe_pd(Path(chain_pd.model))["budget_bytes"] is None
    first = run(chain_pd.model, max_pds=1)  # one PD: auto evicts (several PDs: test_multi_pd.py)
    assert first["create_failures"] == 1 and first["capacity_bytes_found"] == SIMULATOR_CAPACITY
    assert first["pd_mismatches"] == [] and first["pd_peak_predicted_bytes"] == first["pd_peak_bytes"]
    assert first["pd_peak_bytes"] <= SIMULATOR_CAPACITY
    stored = json.loads(cache_file().read_text())
    assert [v["capacity_bytes"] for v in stored.values()] == [SIMULATOR_CAPACITY]
    again = describe_pd(Path(chain_pd.model))
    assert again["budget_source"] == "learned" and again["budget_bytes"] == SIMULATOR_CAPACITY
    second = run(chain_pd.model, max_pds=1)
    assert second["create_failures"] == 0 and second["pd_failures_handled"] == 0
    assert second["pd_budget_source"] == "learned"
    assert second["evictions"] == first["evictions"] and second["creates"] == first["creates"]
    # Belady on the static order reaches what the pool did in the second iteration
    creations = again["methods"]["chain"]["min_creations_per_iteration"]
    assert second["creates"] - 400 <= creations + 1


def test_bounded_bytes_never_exceeds_its_budget(chain12):
    budget = 35 << 20
    s = run(chain12.model, f"bounded:{budget}B", iterations=2)
    assert s["evictions"] > 0 and s["create_failures"] == 0
    assert s["pd_peak_predicted_bytes"] <= budget and s["pd_peak_bytes"] <= budget
    assert s["pd_mismatches"] == [] and s["pd_budget_bytes"] == budget


def test_pd_budget_override_plans_auto(chain12):
    s = run(chain12.model, "auto", iterations=2, pd_budget="35MB", max_pds=1)
    assert s["pd_budget_source"] == "override" and s["pd_budget_bytes"] == 35 << 20
    assert s["create_failures"] == 0 and s["evictions"] > 0
    assert s["pd_peak_predicted_bytes"] <= 35 << 20


def test_pool_flags_a_prediction_qnn_disagrees_with(small_binary):
    with Backend() as be, ContextBinary(small_binary.path) as b:
        need = b.pd_need().total
        pool = ContextPool(be, {"a": b}, "lazy", pd_estimate=pd_estimate_from_log, predictions={"a": 1})
        try:
            pool.acquire("a")
            pool.release("a")
            s = pool.summary()
        finally:
            pool.close()
    assert s["pd_mismatches"] == [{"key": "a", "predicted_bytes": 1,
                                   "reported_bytes": need}]


def test_log_lines():
    lines = ["<V> Setting context 7 reserved space to 20000000",
             "<V> Context 7 estimated PD size requirement is ~19.07MB, including largest Graph estimate "
             "10000000 B",
             "<V> pd 0 not chosen for context 8 with size estimate 10546688, available space 930713"]
    assert pd_reserved_from_log(lines) == pd_estimate_from_log(lines) == 20000000  # the sum, not the max
    assert pd_available_from_log(lines) == 930713 and pd_available_from_log(lines[:2]) is None


def test_belady_plan():
    order = [f"c{i}" for i in range(6)]
    sizes = dict.fromkeys(order, 10)
    assert belady_creations(order, sizes, 60) == (0, 60)
    assert belady_creations(order, sizes, 30)[0] in (3, 4)  # OPT on a cycle: (n-k)/(n-1) misses per call
    assert belady_creations(order, sizes, 5) is None
    p = plan({"a": order[:3], "b": order[3:]}, sizes, 40)
    assert p["eager_fits"] is False and p["methods"]["a"]["min_creations_per_iteration"] == 0
    assert p["methods"]["(interleaved)"]["min_creations_per_iteration"] == 2
    assert plan({"a": order}, dict(sizes, c0=None), 40)["total_bytes"] is None


def test_capacity_counts_other_programs_contexts_in_the_process(chain_pd, chain12, monkeypatch):
    """The PD is the process's: contexts another program keeps live are part of what QNN reserved,
    so the capacity learned while they live is still the device's (not smaller by theirs)."""
    _a_device(monkeypatch)
    with qnnrt.load(chain12.model, residency="eager") as other:
        other.run(None, {"x": X})
        assert len(other.pool.summary()["pd_estimate_bytes"]) == 12      # 12 contexts stay live
        first = run(chain_pd.model, iterations=1, max_pds=1)
    assert first["create_failures"] == 1 and first["capacity_bytes_found"] == SIMULATOR_CAPACITY
