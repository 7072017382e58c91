"""Multi-PD residency against the real simulator: contexts spread over PD worker processes, every
one resident, outputs bit-identical to one PD in this process; faults end cleanly."""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import qnnrt
from qnnrt.runtime.pd_fleet import MultiPdPool, PdWorkerError
from tests.helpers.qnn_fixtures import WIDTH

BUDGET = "64MiB"  # six chain12 contexts (10.5 MB each) per PD: the program needs two


def _x(seed: int) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal((1, WIDTH)).astype(np.float32)}


def _opts(**kw) -> qnnrt.LoadOptions:
    return qnnrt.LoadOptions(pd_budget=BUDGET, **kw)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not reaped yet) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _gone_soon(pids: list[int]) -> bool:
    for _ in range(50):
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_multi_pd_bit_identical_to_one_pd_and_never_creates_again(chain12):
    xs = [_x(i) for i in range(3)]
    with qnnrt.load(chain12.model, residency="lazy") as p:
        ref = [p.run(None, x) for x in xs]
    with qnnrt.load(chain12.model, residency="multi-pd:2", options=_opts()) as p:
        assert isinstance(p.pool, MultiPdPool)
        outs = [p.run(None, x) for x in xs]
        p.compiled = False   # the reference path goes through the workers too
        outs.append(p.run(None, xs[0]))
        s = p.pool.summary()
        pids = [w["pid"] for w in s["pd_workers"]]
    for a, b in zip(outs, ref + [ref[0]]):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])
    assert s["pds"] == 2 and s["creates"] == 12 and s["evictions"] == 0
    assert [w["contexts"] for w in s["pd_workers"]] == [6, 6]
    assert s["htp_cores_reported"] == 1 and "one HTP device" in s["pd_devices"]
    assert all(w["pd_reported_bytes"] == w["pd_predicted_bytes"] for w in s["pd_workers"])
    assert sum(w["graph_calls"] for w in s["pd_workers"]) == 4 * 12
    assert _gone_soon(pids)  # close stopped every worker


def test_auto_spreads_a_program_that_does_not_fit_one_pd(chain12):
    with qnnrt.load(chain12.model, residency="auto", options=_opts()) as p:
        assert isinstance(p.pool, MultiPdPool)
        p.run(None, _x(0))
        s = p.pool.summary()
    assert s["pds"] >= 2 and s["creates"] == 12
    assert all(w["pd_predicted_bytes"] <= 64 << 20 for w in s["pd_workers"])
    with qnnrt.load(chain12.model, residency="auto", options=_opts(max_pds=1)) as p:
        assert not isinstance(p.pool, MultiPdPool)  # one PD that evicts, as before


def test_killed_worker_is_a_clean_error_and_leaves_no_process(chain12):
    with qnnrt.load(chain12.model, residency="multi-pd:3", options=_opts()) as p:
        p.run(None, _x(0))
        pids = [w.pid for w in p.pool.workers]
        last = p.pool.workers[-1]
        os.kill(last.pid, signal.SIGKILL)
        with pytest.raises(PdWorkerError) as ei:
            p.run(None, _x(1))
        msg = str(ei.value)
        assert f"PD {last.index}" in msg and last.keys[0] in msg and "killed by SIGKILL" in msg
        assert _gone_soon(pids)  # the other workers were stopped at once
        with pytest.raises(PdWorkerError):  # and the program says so, every time
            p.run(None, _x(1))


def test_two_methods_sharing_a_context_across_pds(two_method_program, chain12):
    x = _x(3)
    with qnnrt.load(two_method_program, residency="lazy") as p:
        ref = {m: p.run(m, x) for m in ("first", "second")}
    budget = 1 << 30
    with qnnrt.load(two_method_program, residency="multi-pd:1",
                    options=qnnrt.LoadOptions(pd_budget=budget)) as p:
        got = {m: p.run(m, x) for m in ("second", "first", "second")}
        s = p.pool.summary()
    assert s["creates"] == 1 and s["pds"] == 1
    for m in ref:
        assert np.array_equal(got[m]["y"], ref[m]["y"])


def test_worker_that_cannot_create_fails_the_load(chain_pd):
    """A budget far above the real PD puts all 400 contexts on one worker, which cannot create them
    all: the load fails with the worker's QNN error, and no worker is left."""
    before = set(_children())
    with pytest.raises(PdWorkerError) as ei:
        qnnrt.load(chain_pd.model, residency="multi-pd:1",
                   options=qnnrt.LoadOptions(pd_budget="1TB")).close()
    assert "PD 0" in str(ei.value) and "creating its 400 context(s)" in str(ei.value)
    assert _gone_soon([p for p in _children() if p not in before])


def _children() -> list[int]:
    me = str(os.getpid())
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if f.read().split(")")[-1].split()[1] == me:
                        out.append(int(d))
            except OSError:
                pass
    return out


def test_inspect_pd_shows_the_placement(chain_pd):
    from qnnrt.cli.inspect_pd import describe_pd
    d = describe_pd(chain_pd.model)
    pl = d["placement"]
    assert pl["pds"] == 2 and sum(g["contexts"] for g in pl["groups"]) == 400
    assert all(g["predicted_bytes"] <= d["budget_bytes"] for g in pl["groups"])
    one = describe_pd(chain_pd.model, max_pds=1)["placement"]
    assert "at most 1 allowed" in one["error"]


def test_heap_profile_covers_every_pd(chain12, tmp_path):
    import json
    heap = tmp_path / "heap.txt"
    with qnnrt.load(chain12.model, residency="multi-pd:2",
                    options=_opts(heap_profiling_path=str(heap))) as p:
        p.run(None, _x(0))
    d = json.loads(heap.with_name("heap.txt.json").read_text())
    assert sorted(d["processes"]) == ["pd0", "pd1"]
    for r in d["processes"].values():  # each PD's own timeline: 6 creates, 6 frees, none live
        assert r["stats"]["creates"] == 6 and r["stats"]["frees"] == 6 and r["stats"]["live"] == 0
    lines = heap.read_text().splitlines()
    before = int(lines[0].rsplit(",", 1)[1])
    parts = [d["processes"][k]["before_context_created"] for k in ("pd0", "pd1")]
    assert before > sum(parts) > 0   # this process's checkpoint plus each worker's
    assert "summed over this process and 2 PD worker" in d["file_source"]


def test_beyond_max_pds_each_pd_evicts(chain12):
    """12 contexts of 10.5 MB under a 32 MiB budget need 5 PDs; with at most 2, each PD holds 6
    and evicts as one PD does: outputs unchanged, no failed creation."""
    x = _x(5)
    with qnnrt.load(chain12.model, residency="lazy") as p:
        ref = p.run(None, x)
    with qnnrt.load(chain12.model, residency="auto",
                    options=qnnrt.LoadOptions(pd_budget="32MiB", max_pds=2)) as p:
        assert isinstance(p.pool, MultiPdPool) and p.placement.evicting == [0, 1]
        outs = [p.run(None, x) for _ in range(2)]
        s = p.pool.summary()
    for o in outs:
        assert all(np.array_equal(o[k], ref[k]) for k in ref)
    assert s["pds"] == 2 and s["evictions"] > 0 and s["creates"] > 12
    assert all(w["evicting"] for w in s["pd_workers"])


def test_portable_channel_gives_the_same_outputs(chain12, monkeypatch):
    """The fallback transport (a multiprocessing connection, what Windows uses) on this machine."""
    from qnnrt.runtime import pd_channel
    x = _x(7)
    with qnnrt.load(chain12.model, residency="lazy") as p:
        ref = p.run(None, x)
    monkeypatch.setattr(pd_channel, "use_pipes", lambda: False)
    with qnnrt.load(chain12.model, residency="multi-pd:2", options=_opts()) as p:
        assert isinstance(p.pool.workers[0].end, pd_channel.ConnEnd)
        out = p.run(None, x)
    assert all(np.array_equal(out[k], ref[k]) for k in ref)


def test_pte_delegates_spread_over_pds(tmp_path, small_binary):
    """.pte delegates are binaries in memory (slices of the file): the workers get their bytes."""
    from tests.helpers.pte_writer import chain_pte
    pte = chain_pte(tmp_path / "six.pte", small_binary.path.read_bytes(), 6, WIDTH)
    x = np.linspace(-1, 1, WIDTH, dtype=np.float32)[None]
    with qnnrt.load(pte, residency="lazy") as p:
        ref = p.run(None, [x])
    with qnnrt.load(pte, residency="multi-pd:2", options=qnnrt.LoadOptions(pd_budget="1GiB")) as p:
        out = p.run(None, [x])
        s = p.pool.summary()
    assert s["pds"] == 2 and s["creates"] == 6
    assert all(np.array_equal(out[k], ref[k]) for k in ref)


def test_arena_buffers_pass_between_pds_without_a_copy(chain12):
    """Graph calls bound to arena buffers (`Program.buffer`): each worker writes its output where
    the next graph, on another PD, reads it; nothing is staged in this process. Compared with the
    same graphs chained in this process (the program's CPU ops left out on both sides)."""
    from qnnrt.runtime.method import QnnStep
    x = _x(11)["x"]
    with qnnrt.load(chain12.model, residency="lazy") as p:
        steps = [s for s in p.method(None).steps if isinstance(s, QnnStep)]
        ref = x
        for s in steps:
            g = p.pool.acquire(s.key).graph(s.graph)
            ref = g.execute([ref])[g.spec.outputs[0].name]
            p.pool.release(s.key)
    with qnnrt.load(chain12.model, residency="multi-pd:2", options=_opts()) as p:
        cur = p.buffer((1, WIDTH), np.float32)
        cur[...] = x
        calls = []
        for s in steps:
            spec = p.binaries[s.key].graph(s.graph)
            c = p.bound_call(s.key, spec)
            nxt = p.buffer(tuple(spec.outputs[0].shape), spec.outputs[0].dtype)
            c.set_input(0, cur)
            c.set_output(0, nxt)
            calls.append(c)
            cur = nxt
        for c in calls:
            c()
            assert c.staged == 0   # arena-bound: no staging copy
        assert {c.worker.index for c in calls} == {0, 1}
        out = cur.copy()
    assert out.dtype == ref.dtype and np.array_equal(out.reshape(ref.shape), ref)
