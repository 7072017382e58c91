"""Kinds of host (runtime/hosts/): a new kind is one module with a `KIND` listed in `hosts.KINDS`;
the program is held by the first kind that takes it, its plans bind every graph through that
kind's hosts, and a kind that declines leaves the program to the next."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import qnnrt
from qnnrt.core import GraphSpec
from qnnrt.core.call import PreparedCall
from qnnrt.runtime import hosts
from qnnrt.runtime.hosts import HostRequest, OpenedHosts, Sizing
from qnnrt.runtime.hosts.this_process import KIND as THIS_PROCESS, ThisProcess
from qnnrt.runtime.program import ProgramOptions
from tests.helpers.qnn_fixtures import WIDTH

THIS_MODULE = __name__


class CountingHosts(ThisProcess):
    """This process, counting what plans ask of it."""
    bound: list[str]

    def bound_call(self, key: str, spec: GraphSpec) -> PreparedCall:
        self.bound.append(key)
        return super().bound_call(key, spec)


class CountingKind:
    """Holds a program when `take` is set: as this process does, through CountingHosts."""
    name = "counting (tests)"

    def __init__(self) -> None:
        self.take, self.asked = True, []

    def open(self, request: HostRequest, sizing: Sizing) -> OpenedHosts | None:
        self.asked.append(request)
        if not self.take:
            return None
        opened = THIS_PROCESS.open(request, sizing)
        assert isinstance(opened.hosts, ThisProcess)
        counting = CountingHosts(request.backend, opened.hosts.shared_memory)
        counting.bound = []
        return OpenedHosts(opened.pool, counting)


KIND = CountingKind()


@pytest.fixture
def counting(monkeypatch):
    monkeypatch.setattr(hosts, "KINDS", (THIS_MODULE, "qnnrt.runtime.hosts.this_process"))
    KIND.take, KIND.asked = True, []
    return KIND


def _x() -> dict:
    return {"x": np.random.default_rng(5).standard_normal((1, WIDTH)).astype(np.float32)}


def test_a_registered_kind_holds_the_program_and_its_plans_bind_through_it(chain12, counting):
    with qnnrt.load(chain12.model, residency="lazy") as p:
        want = p.run(None, _x())
    with qnnrt.load(chain12.model, residency="lazy") as p:
        got = p.run(None, _x())
        assert isinstance(p.hosts, CountingHosts)
        order = p.method(None).graph_order
        assert p.hosts.bound == order and len(order) == 12   # every graph, bound once
        assert len(counting.asked) == 2   # each load asked it once
        request = counting.asked[-1]
        assert request.orders == {p.method(None).name: order}
    assert np.array_equal(got[next(iter(got))], want[next(iter(want))])


def test_a_kind_that_declines_leaves_the_program_to_the_next(chain12, counting):
    counting.take = False
    with qnnrt.load(chain12.model, residency="lazy") as p:
        p.run(None, _x())
        assert type(p.hosts) is ThisProcess and len(counting.asked) == 1


def test_program_options_are_one_frozen_object():
    o = ProgramOptions(residency="eager", max_pds=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.max_pds = 3  # type: ignore[misc]
