"""PowerVote against the real HTP simulator library, which implements the perf infrastructure:
votes made and accepted, released at close (once), a refusal recorded and never raised, two votes in
one process kept apart."""
import pytest

from qnnrt.core import Backend
from qnnrt.core.perf import Dcvs, PowerVote, VotePlan, perf_infrastructure
from qnnrt.runtime.performance import DOWN_VOTE, MODES, Choice

BURST = Choice("burst", "option").plan()


@pytest.fixture
def backend():
    be = Backend(soc="SM8650")
    yield be
    be.close()


def _what(vote: PowerVote) -> list[tuple[str, str, bool]]:
    return [(c.function, c.what, c.accepted) for c in vote.calls]


def test_the_simulator_offers_the_perf_infrastructure(backend):
    fns, why = perf_infrastructure(backend)
    assert fns is not None and fns.complete and why == ""


def test_burst_vote_is_made_accepted_and_released_once_at_close(backend):
    v = PowerVote(backend, BURST)
    assert v.active and v.power_config_id != 0
    assert _what(v) == [("createPowerConfigId", "device 0 core 0", True),
                        ("setPowerConfig", "dcvs_v3 up", True),
                        ("setPowerConfig", "rpc control latency 100 us, polling time 9999 us", True)]
    v.close()
    v.close()                                   # idempotent: no second release
    assert _what(v)[3:] == [("setPowerConfig", "dcvs_v3 down", True),
                            ("destroyPowerConfigId", f"id {v.power_config_id}", True)]
    assert not v.active


def test_closing_the_backend_releases_a_vote_left_open(backend):
    v = PowerVote(backend, BURST)
    backend.close()                             # the vote was adopted: released before deviceFree
    assert v.closed and [c.function for c in v.calls][-2:] == ["setPowerConfig", "destroyPowerConfigId"]
    assert all(c.accepted for c in v.calls)


def test_a_refused_vote_is_recorded_not_raised(backend):
    """The simulator has one core: an id on core 5 is refused (13001); nothing raises, no set follows."""
    v = PowerVote(backend, BURST, core_id=5)
    assert [(c.function, c.accepted) for c in v.calls] == [("createPowerConfigId", False)]
    assert v.calls[0].code == 13001 and "createPowerConfigId refused" in v.unavailable
    assert v.closed
    v.close()
    assert len(v.calls) == 1                    # nothing to release


def test_two_votes_in_one_process_do_not_fight(backend):
    """Each program has its own id: releasing one leaves the other's id valid (QNN refuses a set on a
    destroyed id with 13001, so an accepted re-vote proves it is still there)."""
    a, b = PowerVote(backend, BURST), PowerVote(backend, BURST)
    assert a.power_config_id != b.power_config_id
    a.close()
    b.vote(BURST)
    assert all(c.accepted for c in b.calls) and b.active
    b.close()


def test_every_mode_is_accepted_by_the_simulator(backend):
    for name, mode in MODES.items():
        plan = Choice(name, "option").plan()
        if mode is None:
            assert plan is None                 # default: no vote at all
            continue
        with PowerVote(backend, plan) as v:
            assert all(c.accepted for c in v.calls), (name, v.report())


def test_dcvs_payload_fields(backend):
    c = Dcvs(dcvs_enable=1, power_mode=4, sleep_latency_us=2000, bus_corner=0x30,
             core_corner=0x30).config(77)
    d = c.dcvsV3Config
    assert (c.option, d.contextId, d.setDcvsEnable, d.dcvsEnable, d.powerMode, d.sleepLatency) == \
        (1, 77, 1, 1, 4, 2000)
    assert (d.busVoltageCornerMin, d.busVoltageCornerTarget, d.coreVoltageCornerMax) == (0x30,) * 3
    assert DOWN_VOTE.config(1).dcvsV3Config.sleepLatency == 2000


def test_a_plan_without_rpc_settings_makes_no_rpc_call(backend):
    with PowerVote(backend, VotePlan(BURST.up, BURST.down)) as v:
        assert [c.what for c in v.calls] == ["device 0 core 0", "dcvs_v3 up"]
