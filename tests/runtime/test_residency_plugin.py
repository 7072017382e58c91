"""A residency policy is one class and one registration: one written here runs a real program through
`qnnrt.load(..., residency=...)`; the farthest-next-use rule the pool and the planner share."""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

import qnnrt
from qnnrt.errors import QnnrtError
from qnnrt.runtime.hosts.pd.placement import belady_creations
from qnnrt.runtime.residency import Bound, CallOrder, Residency, farthest_next_use, register
from qnnrt.runtime.residency.policy import whole_number
from tests.helpers.qnn_fixtures import WIDTH

X = np.linspace(-2, 2, WIDTH, dtype=np.float32)[None]


@register
@dataclass(frozen=True)
class KeepFirst(Residency):
    """keep-first:N: the program's first N contexts are created at load and never evicted (for a
    chain, the first N it calls); the others take turns in one more slot."""
    name = "keep-first"
    usage = "keep-first:N"
    n: int = 1

    @classmethod
    def from_argument(cls, arg: str | None, text: str) -> KeepFirst:
        return cls(whole_number(arg or "", text, "N"))

    def __str__(self) -> str:
        return f"keep-first:{self.n}"

    @property
    def bound(self) -> Bound:
        return Bound(max_live=self.n + 1)

    def preload(self, keys: Sequence[str]) -> list[str]:
        return list(keys[:self.n])

    def victim(self, idle: Sequence[str], order: CallOrder, position: int) -> str | None:
        kept = set(order.first_used()[:self.n])
        return farthest_next_use([k for k in idle if k not in kept], order, position)


@register
@dataclass(frozen=True)
class WrongVictim(Residency):
    """Names a context that is not idle: the pool must refuse it, not free a running context."""
    name = "wrong-victim"

    @property
    def bound(self) -> Bound:
        return Bound(max_live=1)

    def victim(self, idle: Sequence[str], order: CallOrder, position: int) -> str | None:
        return "not-a-context"


def test_a_policy_from_a_test_module_runs_a_program(chain12):
    n, kept, iterations = 12, 3, 2
    with qnnrt.load(chain12.model, residency="lazy") as prog:
        expected = [prog.run(None, {"x": X}) for _ in range(iterations)]
    with qnnrt.load(chain12.model, residency=f"keep-first:{kept}") as prog:
        assert prog.pool.residency == KeepFirst(kept)
        assert prog.pool.summary()["creates"] == kept               # preloaded before the first call
        first = prog.pool.live_keys
        outs = [prog.run(None, {"x": X}) for _ in range(iterations)]
        s = prog.pool.summary()
        assert set(first) <= set(prog.pool.live_keys)               # never evicted
    for got, want in zip(outs, expected):
        assert all(np.array_equal(got[k], want[k]) for k in want)
    # each run creates the n - kept others in the one spare slot; each but the very first evicts one
    assert s["creates"] == kept + (n - kept) * iterations
    assert s["evictions"] == (n - kept) * iterations - 1
    assert s["reloads"] == (n - kept) * (iterations - 1)
    assert s["peak_live"] == kept + 1 and s["policy"] == f"keep-first:{kept}"


def test_the_pool_refuses_a_victim_that_is_not_idle(chain12):
    with qnnrt.load(chain12.model, residency="wrong-victim") as prog:
        with pytest.raises(QnnrtError, match="victim 'not-a-context' is not one of the idle live"):
            prog.run(None, {"x": X})


def test_registered_policies_parse_and_are_listed():
    assert Residency.parse("Keep-First:2") == KeepFirst(2) and str(KeepFirst(2)) == "keep-first:2"
    with pytest.raises(QnnrtError, match="keep-first:0.*N must be a whole number"):
        Residency.parse("keep-first:0")
    with pytest.raises(QnnrtError, match=r"unknown residency 'greedy'; use auto, .*keep-first:N"):
        Residency.parse("greedy")
    with pytest.raises(QnnrtError, match="eager takes no argument"):
        Residency.parse("eager:3")


def test_a_name_is_registered_once():
    class Other(Residency):
        name = "lazy"
    with pytest.raises(QnnrtError, match="residency 'lazy' is already"):
        register(Other)

    class Spelled(Residency):
        name = "a:b"
    with pytest.raises(QnnrtError, match="lower-case word without ':'"):
        register(Spelled)


# -- farthest next use ---------------------------------------------------------------------------
def _next_use_by_scan(order: list[str], key: str, position: int) -> float:
    """Calls from `position` to the next use of `key`, counted one call at a time (cyclic)."""
    n = len(order)
    return next((d for d in range(1, n + 1) if order[(position + d) % n] == key), float("inf"))


def test_next_use_is_cyclic():
    order = CallOrder(["a", "b", "c", "a", "d"])
    assert order.next_use("a", 0) == 3 and order.next_use("a", 3) == 2   # wraps to the next run
    assert order.next_use("b", 1) == 5                                  # itself, one run later
    assert order.next_use("z", 0) == float("inf")                       # never used
    assert order.next_after(4, "d") == "a" and order.next_after(0, "a") == "b"
    assert CallOrder(["a", "a"]).next_after(0, "a") is None
    assert order.first_used() == ["a", "b", "c", "d"]


def test_farthest_next_use_picks_the_latest_then_the_greatest_key():
    order = CallOrder(["a", "b", "c", "a", "d"])
    assert farthest_next_use(["a", "b", "d"], order, 0) == "d"    # a: 3, b: 1, d: 4 calls ahead
    assert farthest_next_use(["a", "c"], order, 2) == "c"         # a: 1, c: 5
    assert farthest_next_use(["y", "x", "a"], order, 0) == "y"    # never used, ties by key
    assert farthest_next_use([], order, 0) is None


def test_next_use_matches_a_scan_of_the_order():
    rng = random.Random(7)
    for _ in range(200):
        keys = [rng.choice("abcdef") for _ in range(rng.randint(1, 12))]
        order = CallOrder(keys)
        for pos in range(len(keys)):
            for key in "abcdefg":
                assert order.next_use(key, pos) == _next_use_by_scan(keys, key, pos), (keys, key, pos)
            live = rng.sample("abcdefg", rng.randint(1, 4))
            want = max(live, key=lambda k: (_next_use_by_scan(keys, k, pos), k))
            assert farthest_next_use(live, order, pos) == want


def _optimal_misses(n: int, k: int, iterations: int) -> list[int]:
    """Misses in each run of the cyclic order c0..c(n-1) under Belady's optimum with k slots,
    found by scanning the whole future (all runs) for each next use."""
    order = [f"c{i}" for i in range(n)] * iterations
    live: set[str] = set()
    misses = [0] * iterations
    for t, key in enumerate(order):
        if key in live:
            continue
        misses[t // n] += 1
        if len(live) >= k:
            def ahead(c: str, t: int = t) -> int:
                return next((u for u in range(t + 1, len(order)) if order[u] == c), len(order))
            live.remove(max(live, key=lambda c: (ahead(c), c)))
        live.add(key)
    return misses


@pytest.mark.parametrize("n, k", [(12, 3), (12, 4), (12, 6), (5, 2)])
def test_the_planner_evicts_as_belady_does(n, k):
    """The placement's simulation (hosts/pd/placement.py) evicts by the same function: with equal
    sizes it is Belady's optimum, run by run (the horizon of the scan is far enough past the runs
    compared)."""
    order = [f"c{i}" for i in range(n)]
    optimal = _optimal_misses(n, k, iterations=8)
    for runs in (1, 2, 3, 4):
        creations, peak = belady_creations(order, dict.fromkeys(order, 1), budget=k, iterations=runs)
        assert (creations, peak) == (optimal[runs - 1], k), runs
