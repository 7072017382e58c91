"""The trace of a run on the real simulator (LoadOptions(trace=...)): a valid trace-event file, every
graph call one slice on the track of the process that made it, slices nested, counters matching the
report's figures; a multi-PD run puts each worker's part on its own track, on the same clock."""
from __future__ import annotations

import json
import os

import numpy as np

import qnnrt
from qnnrt.profiling.trace import Tracer
from tests.helpers.qnn_fixtures import WIDTH
from tests.helpers.trace_check import check_trace, parent_of

BUDGET = "64MiB"  # six chain12 contexts (10.5 MB each) per PD: the program needs two


def _x(seed: int) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal((1, WIDTH)).astype(np.float32)}


def test_trace_of_a_one_pd_run_with_evictions(chain12, tmp_path):
    path = tmp_path / "trace.json"
    with qnnrt.load(chain12.model, residency="bounded:4",
                    options=qnnrt.LoadOptions(trace=str(path))) as p:
        for i in range(3):
            p.run(None, _x(i))
    s = p.pool.summary()     # after close: a prefetch still running then is in it
    t = check_trace(path)
    me = t.pid_of("main process")
    assert me == os.getpid() and len(t.processes) == 1
    graphs = t.of("graph", me)
    assert len(graphs) == 3 * 12
    assert {g["args"]["context"] for g in graphs} == {f"contexts/c{i:03d}.bin" for i in range(12)}
    runs = t.of("run", me)
    assert [r["args"]["iteration"] for r in runs] == [0, 1, 2]
    for g in graphs:   # inside its iteration's slice
        assert parent_of(t, g)["cat"] == "run"
    assert len(t.of("cpu", me)) == 3 * 12   # each Tanh segment between the graph calls
    creates = [c for c in t.of("context", me) if c["name"].startswith(("create", "re-create"))]
    assert len(creates) == s["creates"] and sum(c["name"].startswith("re-create") for c in creates) == s["reloads"]
    evictions = [c for c in t.of("context", me) if c["name"].startswith("evict")]
    assert len(evictions) == s["evictions"] > 0
    live = t.counter("live contexts", "live", me)
    assert max(live) == s["peak_live"] == 4 and live[-1] == 0
    pd = t.counter("PD in use (bytes, QNN's reservations)", "pd_bytes", me)
    assert max(pd) == s["pd_peak_bytes"] > 0 and pd[-1] == 0
    other = t.data["otherData"]
    assert not other["truncated"] and other["dropped_events"] == 0 and "monotonic" in other["clock"]


def test_trace_of_a_multi_pd_run_puts_each_worker_on_its_track(chain12, tmp_path):
    path, heap = tmp_path / "trace.json", tmp_path / "heap.txt"
    with qnnrt.load(chain12.model, residency="multi-pd:2",
                    options=qnnrt.LoadOptions(pd_budget=BUDGET, trace=str(path),
                                              heap_profiling_path=str(heap))) as p:
        for i in range(3):
            p.run(None, _x(i))
        p.compiled = False      # the reference path calls the worker's graphs one at a time
        p.run(None, _x(0))
        s = p.pool.summary()
        groups = [list(g) for g in p.pool.placement.groups]
    t = check_trace(path)
    local, remote = s["pd_workers"]
    me, worker = t.pid_of("main process"), t.pid_of("PD 1 worker")
    assert (me, worker) == (local["pid"], remote["pid"]) and len(t.processes) == 2
    mine, theirs = t.of("graph", me), t.of("graph", worker)
    assert {g["args"]["context"] for g in mine} <= set(groups[0])
    assert {g["args"]["context"] for g in theirs} == set(groups[1])
    assert len(theirs) == remote["graph_calls"] == 4 * 6
    assert len(mine) == 3 * 6    # the reference path's local calls go through Graph.execute: untraced
    segments = t.of("pd", me)    # the main process waits on the worker's part of each iteration
    assert len(segments) == 3 and all(s["name"] == "PD 1: 6 graph call(s)" for s in segments)
    worker_runs = t.of("pd", worker)
    assert len(worker_runs) == 3
    for seg, run in zip(sorted(segments, key=lambda e: e["ts"]), sorted(worker_runs, key=lambda e: e["ts"])):
        assert seg["ts"] <= run["ts"] and run["ts"] + run["dur"] <= seg["ts"] + seg["dur"]  # one clock
    for pid, summary in ((me, local), (worker, remote)):
        creates = [c for c in t.of("context", pid) if c["name"].startswith("create")]
        frees = [c for c in t.of("context", pid) if c["name"].startswith("free")]
        assert len(creates) == len(frees) == summary["creates"] == 6
        live = t.counter("live contexts", "live", pid)
        assert max(live) == 6 and live[-1] == 0
        pd = t.counter("PD in use (bytes, QNN's reservations)", "pd_bytes", pid)
        assert max(pd) == summary["pd_reported_bytes"] and pd[-1] == 0
        assert t.counter("host heap (bytes)", "heap_in_use", pid)   # the heap profiler's samples
    report = json.loads(heap.with_name("heap.txt.json").read_text())
    sampled = [e for e in report["processes"]["pd1"]["timeline"] if e["event"] != "after_last_free"]
    assert len(t.counter("host heap (bytes)", "rss", worker)) == len(sampled)   # each sample, a counter


def test_a_shared_tracer_is_written_by_its_owner_and_capped(chain12, tmp_path):
    tracer = Tracer(max_events=30)
    with qnnrt.load(chain12.model, residency="lazy", options=qnnrt.LoadOptions(trace=tracer)) as p:
        p.run(None, _x(0))
    assert tracer.written is None       # the program did not write a tracer it was given
    out = tracer.write(tmp_path / "t.json")
    t = check_trace(out)
    other = t.data["otherData"]
    assert other["truncated"] and other["events"] == 30 and other["dropped_events"] > 0
    assert "--trace-max-events" in other["note"]
    assert [i["name"] for i in t.instants if i["cat"] == "trace"] == ["trace cap reached: later events dropped"]


def test_programs_sharing_a_tracer_each_create_their_contexts(chain12, tmp_path):
    """A re-creation is one of a context the same pool created before, not another program's."""
    tracer = Tracer()
    for residency in ("lazy", "bounded:4"):
        with qnnrt.load(chain12.model, residency=residency, options=qnnrt.LoadOptions(trace=tracer)) as p:
            p.run(None, _x(0))
            p.run(None, _x(1))
        reloads = p.pool.summary()["reloads"]   # after close: a prefetch running then is in it
    t = check_trace(tracer.write(tmp_path / "t.json"))
    names = [c["name"] for c in sorted(t.of("context"), key=lambda c: c["ts"])]
    assert sum(n.startswith("re-create") for n in names) == reloads > 0
    assert sum(n.startswith("create") for n in names) == 12 + 12


def test_a_recovery_is_a_slice_with_the_re_creation_and_the_call_inside(fault_shim, monkeypatch, tmp_path):
    from tests.helpers.data import EXECUTORCH
    folder = EXECUTORCH / "many_4_fp16"
    monkeypatch.setenv("QNNRT_FAULT_REAL", str(fault_shim.real))
    monkeypatch.delenv("QNNRT_FAULT_EXEC", raising=False)
    fault_shim.counter().qnnrt_fault_reset()
    monkeypatch.setenv("QNNRT_FAULT_EXEC", "6")   # the 2nd graph call of iteration 1 fails with 1100
    feed = [np.load(folder / "forward_input_0.npy")]
    path = tmp_path / "t.json"
    with qnnrt.load(folder / "model.pte", residency="eager", backend_lib=fault_shim.folder,
                    options=qnnrt.LoadOptions(vet=False, trace=str(path))) as p:
        for _ in range(2):
            p.run("forward", feed)
        (rec,) = p.recovery.records
    t = check_trace(path)
    (r,) = t.of("recovery")
    assert r["name"] == "recovery: re-create context" and r["args"]["code"] == 1100 and r["args"]["succeeded"]
    inside = [s for s in t.slices if s is not r and parent_of(t, s) is r]
    kinds = sorted((s["cat"], s["name"].split()[0]) for s in inside)
    assert kinds == [("context", "free"), ("context", "re-create"), ("graph", rec.context)]
    assert len(t.of("graph")) == 2 * 4    # the failed call made no slice; its re-run did
    assert len(t.of("cpu")) > 0           # the .pte's CPU kernels between the delegates
