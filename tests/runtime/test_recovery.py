"""Recovery from transient graph-call failures (runtime/recovery.py), through the Python API, on the
real simulator with failures injected by a forwarding shim (tests/helpers/fault_shim.py): what is
recovered gives the outputs of a clean run, what cannot be recovered is a clean RecoveryError within
the budget, and errors that mean a bug or bad input are never retried."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qnnrt
from qnnrt.errors import InputError, QnnError, RecoveryError
from qnnrt.runtime.recovery import FIRST_STEP, is_transient
from tests.helpers.data import EXECUTORCH

TWO = EXECUTORCH / "two_methods_fp16"     # prefill + decode: two graphs of one shared context
MANY = EXECUTORCH / "many_4_fp16"         # 4 delegates, one context each, CPU kernels between them


def _feed(folder: Path, method: str) -> list[np.ndarray]:
    return [np.load(folder / f"{method}_input_0.npy")]


@pytest.fixture
def inject(fault_shim, monkeypatch):
    """arm("3[:CODE]"): the 3rd graphExecute from now (of this process) fails with CODE (1100)."""
    monkeypatch.setenv("QNNRT_FAULT_REAL", str(fault_shim.real))
    monkeypatch.delenv("QNNRT_FAULT_EXEC", raising=False)
    lib = fault_shim.counter()

    def arm(spec: str) -> None:
        lib.qnnrt_fault_reset()
        monkeypatch.setenv("QNNRT_FAULT_EXEC", spec)
    arm.calls = lib.qnnrt_fault_calls  # type: ignore[attr-defined]
    return arm


def _load(path: Path, backend_lib=None, residency: str = "eager", **opts) -> qnnrt.Program:
    return qnnrt.load(path, residency=residency, backend_lib=backend_lib,
                      options=qnnrt.LoadOptions(vet=False, **opts))


def _interleaved(prog: qnnrt.Program, plan: list[str], folder: Path) -> list[dict]:
    return [prog.run(m, _feed(folder, m)) for m in plan]


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


PLAN = ["prefill", "decode"] * 3   # 6 iterations, one graph call each


@pytest.fixture(scope="module")
def clean_two() -> list[dict]:
    with _load(TWO / "model.pte") as p:
        return _interleaved(p, PLAN, TWO)


@pytest.mark.parametrize("compiled", [True, False], ids=["plan", "reference"])
def test_one_1100_in_iteration_3_of_6_is_recovered_with_clean_outputs(inject, fault_shim, clean_two,
                                                                      compiled):
    with _load(TWO / "model.pte", fault_shim.folder) as p:
        p.compiled = compiled
        creates = p.pool.stats.creates
        inject("3")
        got = _interleaved(p, PLAN, TWO)
        assert inject.calls() == 7            # 6 calls + the re-run of the failed one
        recs = p.recovery.records
        assert len(recs) == 1
        r = recs[0]
        assert (r.graph, r.iteration, r.code, r.code_name, r.recreated, r.succeeded) == \
            ("prefill", 2, 1100, "QNN_COMMON_ERROR_GENERAL", "context", True)
        assert r.contexts == list(p.binaries) and r.seconds > 0
        assert p.pool.stats.creates == creates + 1     # the shared context, created again once
        assert p.recovery.summary()["succeeded"] == 1
    for it, (a, b) in enumerate(zip(got, clean_two)):
        assert _equal(a, b), f"iteration {it} differs from the clean run"


@pytest.mark.parametrize("code, recreated, restarts", [(1007, "contexts", False), (1011, "backend", True)])
def test_dsp_restart_codes_recreate_every_context_or_the_backend(inject, fault_shim, code, recreated,
                                                                 restarts, monkeypatch):
    with _load(MANY / "model.pte") as p:
        clean = [p.run("forward", _feed(MANY, "forward")) for _ in range(2)]
    restarted = []
    from qnnrt.core import Backend
    real_restart = Backend.restart
    monkeypatch.setattr(Backend, "restart", lambda self: (restarted.append(1), real_restart(self)))
    with _load(MANY / "model.pte", fault_shim.folder) as p:
        inject(f"6:{code}")                  # the 2nd graph of iteration 1
        got = [p.run("forward", _feed(MANY, "forward")) for _ in range(2)]
        (r,) = p.recovery.records
        assert (r.code, r.recreated, r.iteration, r.succeeded) == (code, recreated, 1, True)
        assert sorted(r.contexts) == sorted(p.binaries)   # eager: all 4 were live, all made again
        assert sorted(p.pool.live_keys) == sorted(p.binaries)
        assert bool(restarted) == restarts
    assert all(_equal(a, b) for a, b in zip(got, clean))


def test_failure_under_bounded_residency_is_recovered(inject, fault_shim):
    with _load(MANY / "model.pte") as p:
        clean = [p.run("forward", _feed(MANY, "forward")) for _ in range(3)]
    with _load(MANY / "model.pte", fault_shim.folder, residency="bounded:2") as p:
        inject("6")
        got = [p.run("forward", _feed(MANY, "forward")) for _ in range(3)]
        (r,) = p.recovery.records
        assert r.succeeded and r.recreated == "context"
        assert p.pool.summary()["peak_live"] <= 2
    assert all(_equal(a, b) for a, b in zip(got, clean))


def test_persistent_failure_is_a_clean_error_within_the_budget(inject, fault_shim, clean_two):
    with _load(TWO / "model.pte", fault_shim.folder, max_recoveries=2) as p:
        inject("3-")                          # the 3rd call and every later one
        _interleaved(p, PLAN[:2], TWO)
        with pytest.raises(RecoveryError) as ei:
            p.run("prefill", _feed(TWO, "prefill"))
        e = ei.value
        assert isinstance(e, QnnError) and e.code == 1100 and e.recoveries == 2
        assert p.recovery.used == 2 and not any(r.succeeded for r in p.recovery.records)
        text = str(e)
        for part in ("'prefill'", "1100", "QNN_COMMON_ERROR_GENERAL", "not recovered after 2",
                     "budget is used up", "newer QNN", "--max-recoveries"):
            assert part in text, part
        # budget spent: the next failure is not retried at all, and says so
        with pytest.raises(RecoveryError, match="not recovered after 0"):
            p.run("decode", _feed(TWO, "decode"))
        assert p.recovery.used == 2
        # the program is still sound: once the device behaves, it runs and gives clean outputs
        inject("")
        assert _equal(p.run("decode", _feed(TWO, "decode")), clean_two[1])


def test_a_call_failing_again_after_every_step_gives_up(inject, fault_shim):
    with _load(TWO / "model.pte", fault_shim.folder, max_recoveries=10) as p:
        inject("1-")
        with pytest.raises(RecoveryError, match="after the backend, the device") as ei:
            p.run("prefill", _feed(TWO, "prefill"))
        assert ei.value.recoveries == 3       # context, every context, backend: never forever
        assert [r.recreated for r in p.recovery.records] == ["context", "contexts", "backend"]
        assert inject.calls() == 4


def test_no_recovery_when_the_budget_is_zero(inject, fault_shim):
    with _load(TWO / "model.pte", fault_shim.folder, max_recoveries=0) as p:
        inject("1")
        with pytest.raises(RecoveryError, match="not recovered after 0"):
            p.run("prefill", _feed(TWO, "prefill"))
        assert p.recovery.used == 0 and inject.calls() == 1


@pytest.mark.parametrize("code", [6004, 1004, 1008, 7002])
def test_errors_that_mean_a_bug_or_a_bad_binary_are_not_retried(inject, fault_shim, code):
    assert not is_transient(QnnError("graphExecute", code))
    with _load(TWO / "model.pte", fault_shim.folder) as p:
        inject(f"1:{code}")
        with pytest.raises(QnnError) as ei:
            p.run("prefill", _feed(TWO, "prefill"))
        assert not isinstance(ei.value, RecoveryError) and ei.value.code == code
        assert p.recovery.used == 0 and inject.calls() == 1


def test_an_input_error_is_not_retried(inject, fault_shim):
    with _load(TWO / "model.pte", fault_shim.folder) as p:
        inject("1-")
        bad = np.zeros((3, 3), np.float32)
        with pytest.raises(InputError):
            p.run("prefill", [bad])
        assert p.recovery.used == 0 and inject.calls() == 0


def test_transient_codes_come_from_the_one_code_table():
    from qnnrt.core import qnn_codes
    assert {qnn_codes.error_name(c) for c in FIRST_STEP} == {
        "QNN_COMMON_ERROR_GENERAL", "QNN_COMMON_ERROR_SYSTEM_COMMUNICATION",
        "QNN_COMMON_ERROR_SYSTEM_COMMUNICATION_FATAL"}


def test_negative_budget_is_refused():
    with pytest.raises(qnnrt.QnnrtError, match="max_recoveries"):
        _load(TWO / "model.pte", max_recoveries=-1)


@pytest.mark.parametrize("residency", ["eager", "sequential"])  # the plan's fast path / the pool path
def test_epcontext_program_recovers_on_both_plan_paths(inject, fault_shim, chain12, residency):
    """An EPContext program (12 contexts, CPU segments between them): its OnnxMethod runs as a
    MethodPlan (runtime/plan.py), the plan kind the .pte tests above do not reach."""
    from qnnrt.runtime.method import OnnxMethod
    x = np.linspace(-2, 2, 64, dtype=np.float32)[None]
    with qnnrt.load(chain12.model, residency="eager") as p:
        clean = [p.run(None, [x]) for _ in range(2)]
    with qnnrt.load(chain12.model, residency=residency, backend_lib=fault_shim.folder) as p:
        inject("15")                          # graph 3 of iteration 1
        got = [p.run(None, [x]) for _ in range(2)]
        assert type(p.method()) is OnnxMethod and p.compiled
        (r,) = p.recovery.records
        assert r.succeeded and r.iteration == 1 and r.context == p.method().steps[2 * 2].key
    assert all(_equal(a, b) for a, b in zip(got, clean))


def test_heap_timeline_shows_the_recovery_and_stays_consistent(inject, fault_shim, tmp_path):
    heap = tmp_path / "heap.txt"
    with _load(TWO / "model.pte", fault_shim.folder, heap_profiling_path=str(heap)) as p:
        inject("2")
        _interleaved(p, PLAN[:3], TWO)
        assert p.recovery.succeeded == 1
        h = p.heap
    data = h.to_json()
    events = [e["event"] for e in data["timeline"]]
    (mark,) = [e for e in data["timeline"] if e["event"] == "recovered"]
    assert mark["info"]["contexts"] == list(p.binaries) and mark["info"]["backend_restarted"] is False
    assert events.count("create") == 2 and events.count("free") == 2   # load, re-create; free, close
    assert data["warnings"] == [] and data["ok"]


def test_a_transient_failure_while_vetting_is_no_verdict(inject, fault_shim, clean_two, tmp_path,
                                                         monkeypatch):
    """The vetting child's run of a graph fails with 1100 (a device hiccup, not the binary): the
    binary is not rejected and no verdict is cached; the load goes on and the same failure in this
    process is recovered."""
    monkeypatch.setenv("QNNRT_CACHE_DIR", str(tmp_path / "cache"))
    inject("1")   # the first graphExecute of each process: the child's, then this process's
    for _ in range(2):   # nothing was cached: the second load vets again, with the same outcome
        with qnnrt.load(TWO / "model.pte", residency="eager", backend_lib=fault_shim.folder,
                        options=qnnrt.LoadOptions(vet="execute")) as p:
            (r,) = [r for rep in p.vet_reports for r in rep.results]
            assert r.verdict == "partial" and "1100" in r.detail and not r.cached
            got = p.run("prefill", _feed(TWO, "prefill"))
            assert [x.code for x in p.recovery.records] == [1100]
        assert _equal(got, clean_two[0])
        inject("1")
