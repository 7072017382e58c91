"""Multi-PD placement (runtime/hosts/pd/placement.py `place`): deterministic, consecutive, balanced, under budget."""
from __future__ import annotations

import pytest

from qnnrt.errors import QnnrtError
from qnnrt.runtime.hosts.pd.placement import first_use_order, place
from qnnrt.runtime.residency import Residency
from qnnrt.runtime.residency.policies.multi_pd import MultiPd
from tests.helpers.qnn_fixtures import WIDTH


def _sizes(n: int, f=lambda i: 10 + (i % 3)) -> tuple[list[str], dict]:
    keys = [f"c{i:03d}" for i in range(n)]
    return keys, {k: f(i) for i, k in enumerate(keys)}


def test_fewest_pds_consecutive_balanced_under_budget():
    keys, sizes = _sizes(40)        # 440 bytes in all
    p = place(keys, sizes, budget=200, max_pds=4)
    assert len(p.groups) == 3                       # ceil(440 / 200)
    assert [k for g in p.groups for k in g] == keys  # consecutive, each context once, in order
    assert all(b <= 200 for b in p.pd_bytes)
    assert max(p.pd_bytes) - min(p.pd_bytes) <= max(sizes.values())  # balanced
    assert max(p.pd_bytes) < 200  # not the greedy fill (200, 200, 40)


def test_deterministic():
    keys, sizes = _sizes(97, lambda i: 5 + (i * 7919) % 13)
    a = place(keys, sizes, budget=300, max_pds=8)
    b = place(list(keys), dict(reversed(list(sizes.items()))), budget=300, max_pds=8)
    assert a.groups == b.groups


def test_forced_count_and_limits():
    keys, sizes = _sizes(12)
    assert len(place(keys, sizes, budget=1000, max_pds=4, pds=3).groups) == 3
    with pytest.raises(QnnrtError, match="needs 2 PDs"):
        place(keys, sizes, budget=100, max_pds=4, pds=1)
    with pytest.raises(QnnrtError, match="at most 1 allowed"):
        place(keys, sizes, budget=100, max_pds=1)
    with pytest.raises(QnnrtError, match="alone needs"):
        place(keys, sizes, budget=9, max_pds=4)
    with pytest.raises(QnnrtError, match="unknown"):
        place(keys, {**sizes, "c003": None}, budget=100, max_pds=4)


def test_shared_contexts_have_one_place():
    orders = {"prefill": ["a", "b", "c", "d"], "decode": ["a", "e", "c", "f"]}
    order = first_use_order(orders, ["a", "b", "c", "d", "e", "f", "unused"])
    assert order == ["a", "b", "c", "d", "e", "f", "unused"]
    p = place(order, dict.fromkeys(order, 10), budget=30, max_pds=4)
    placed = [k for g in p.groups for k in g]
    assert sorted(placed) == sorted(set(placed)) == sorted(order)


def test_residency_spelling():
    assert Residency.parse("multi-pd") == MultiPd() and Residency.parse("multi-pd").spread.forced
    assert Residency.parse("multi-pd:3").pds == 3 and str(Residency.parse("multi-pd:3")) == "multi-pd:3"
    with pytest.raises(QnnrtError):
        Residency.parse("multi-pd:0")


def test_beyond_max_pds_splits_evenly_and_marks_evicting():
    keys, sizes = _sizes(30)    # 330 bytes, budget 100: 4 PDs needed, 2 allowed
    p = place(keys, sizes, budget=100, max_pds=2, evict=True)
    assert len(p.groups) == 2 and p.evicting == [0, 1] and p.budget_bytes == 100
    assert [k for g in p.groups for k in g] == keys


def _dev(i: int, cores: int = 1):
    from qnnrt.core.device_info import HtpDevice
    return HtpDevice(i, 0, cores, 43, "SM8550", 73, 8, True, False)


def test_pds_go_round_robin_over_the_htp_devices_reported():
    from qnnrt.runtime.hosts.pd.devices import place_on_devices
    two = place_on_devices(3, [_dev(0), _dev(1)])
    assert two.devices == (0, 1, 0) and two.cores_reported == 2
    assert "2 HTP devices" in two.note and "PD 1 on device 1" in two.note
    assert two.arches == (73, 73, 73)   # what each device reports: its worker selects it with that
    assert place_on_devices(2, [_dev(0), _dev(1)], main_device=1).devices == (1, 0)
    one = place_on_devices(3, [_dev(0, cores=2)])
    assert one.devices == (0, 0, 0) and "one HTP device, 2 cores (a PD is per device)" in one.note
    none = place_on_devices(2, None, "no QnnDevice_getPlatformInfo")
    assert none.devices == (0, 0) and "no QnnDevice_getPlatformInfo" in none.note


def test_a_worker_opens_the_device_it_is_placed_on(chain12, monkeypatch):
    """A board reporting two HTP devices (the simulator reports one and accepts any device id):
    the worker's backend opens device 1, its vote names it, outputs are unchanged."""
    import numpy as np
    import qnnrt
    from qnnrt.core import device_info
    x = {"x": np.random.default_rng(0).standard_normal((1, WIDTH)).astype(np.float32)}
    with qnnrt.load(chain12.model, residency="lazy") as p:
        ref = p.run(None, x)
    monkeypatch.setattr(device_info, "platform_info", lambda lib: [_dev(0), _dev(1)])
    opts = qnnrt.LoadOptions(pd_budget="64MiB", performance_mode="burst")
    with qnnrt.load(chain12.model, residency="multi-pd:2", options=opts) as p:
        out = p.run(None, x)
        s = p.pool.summary()
    assert [w["device"] for w in s["pd_workers"]] == [0, 1]
    assert "PD 1 on device 1" in s["pd_devices"]
    assert s["pd_workers"][1]["performance"]["calls"] > 0
    assert all(np.array_equal(out[k], ref[k]) for k in ref)
