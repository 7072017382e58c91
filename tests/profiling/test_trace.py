"""The tracer on its own (no QNN): slices, counters and instants as valid trace-event JSON, the cap
and its note, another process's batch moved onto this clock, per-op slices laid out under a graph
call, the pool hooks beside the heap profiler."""
from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from qnnrt.errors import QnnrtError
from qnnrt.profiling.heap import HeapProfiler
from qnnrt.profiling.observers import PoolObservers, pool_hooks
from qnnrt.profiling.trace import PoolTrace, Tracer
from qnnrt.profiling.trace_events import Mark, TraceBatch
from tests.helpers.trace_check import check_trace, parent_of


def _detailed_events(cycles: list[int]) -> list[dict]:
    return [{"name": "QNN (execute) time", "unit": "us", "value": 120, "sub": []},
            {"name": "Accelerator (execute) time (cycles)", "unit": "cycles", "value": sum(cycles),
             "sub": [{"name": f"Op{i}:OpId_{i} (cycles)", "unit": "cycles", "value": c, "sub": []}
                     for i, c in enumerate(cycles)]}]


def test_slices_counters_and_ops_make_a_valid_nested_trace(tmp_path):
    tr = Tracer(tmp_path / "t.json")
    with tr.scope("run forward", "run", {"iteration": 0}) as s:
        time.sleep(0.001)    # the call's 100 us lie inside the run
        end = tr.now()
        tr.graph_call("contexts/a.bin", "g", end, 0.0001, _detailed_events([30, 0, 70]))
        s.note(extra=1)
    with pytest.raises(ValueError):
        with tr.scope("failing", "run"):
            raise ValueError("x")
    tr.count("live contexts", {"live": 2})
    tr.instant("pd_exhausted", "residency", {"context": "a"})
    tr.close()
    t = check_trace(tmp_path / "t.json")
    (run,) = [x for x in t.slices if x["name"] == "run forward"]
    assert run["args"] == {"iteration": 0, "extra": 1}
    (failed,) = [x for x in t.slices if x["name"] == "failing"]
    assert failed["args"]["error"] == "ValueError"
    (g,) = t.of("graph")
    assert g["name"] == "contexts/a.bin g" and g["args"]["qnn_us"] == 120 and g["args"]["cycles"] == 100
    assert g["args"]["ops"] == 3 and abs(g["dur"] - 100.0) < 0.01
    ops = t.of("op")
    assert [o["name"] for o in ops] == ["Op0", "Op2"]          # the op of 0 cycles has no slice
    assert [o["args"]["cycles"] for o in ops] == [30, 70]
    assert all(parent_of(t, o) is g for o in ops) and parent_of(t, g) is run
    assert abs(ops[0]["dur"] - 30.0) < 0.01 and abs(ops[1]["dur"] - 70.0) < 0.01
    assert t.counter("live contexts", "live", tr.pid) == [2]
    assert [i["name"] for i in t.instants] == ["pd_exhausted"]


def test_the_cap_keeps_the_first_events_and_says_how_many_it_dropped(tmp_path):
    tr = Tracer(max_events=5)
    for i in range(12):
        tr.instant(f"e{i}", "x")
    tr.absorb(TraceBatch(99, "PD 1 worker", ((99, "main"),), (Mark("w", "x", 99, tr.now()),), dropped=2))
    data = tr.to_json()
    other = data["otherData"]
    assert other["events"] == 5 and other["dropped_events"] == 7 + 1 + 2 and other["truncated"]
    assert "cap of 5 events" in other["note"]
    names = [e["name"] for e in data["traceEvents"] if e["ph"] == "i"]
    assert names == ["trace cap reached: later events dropped", "e0", "e1", "e2", "e3", "e4"]
    assert tr.write(tmp_path / "t.json") == str(tmp_path / "t.json")
    with pytest.raises(QnnrtError):
        Tracer(max_events=0)
    with pytest.raises(QnnrtError, match="no path"):
        Tracer().write()


def test_a_workers_batch_lands_on_its_track_on_this_clock(tmp_path):
    main, worker = Tracer(), Tracer(process="PD 1 worker")
    t0 = main.now()
    worker.span("segment", "pd", t0 + 5_000_000, end_ns=t0 + 6_000_000)
    worker.count("live contexts", {"live": 3})
    batch = worker.drain()
    assert batch is not None and batch.process == "PD 1 worker" and len(batch.events) == 2
    assert worker.drain() is None              # drained: nothing twice
    # as if another process sent it (its events carry its pid), its clock 1 ms ahead
    main.absorb(dataclasses.replace(batch, pid=4242), offset_ns=1_000_000)
    out = check_trace(main.write(tmp_path / "t.json"))
    assert out.processes[4242] == "PD 1 worker" and out.pid_of("main process") == main.pid
    (seg,) = out.of("pd", 4242)
    assert abs(seg["ts"] - ((t0 + 4_000_000 - main.origin_ns) / 1000)) < 0.01 and abs(seg["dur"] - 1000) < 0.01
    assert out.counter("live contexts", "live", 4242) == [3]


def test_events_from_threads_get_named_thread_tracks(tmp_path):
    tr = Tracer()
    th = threading.Thread(target=lambda: tr.instant("prefetch", "x"), name="qnnrt-prefetch_0")
    th.start()
    th.join()
    tr.instant("main", "x")
    data = tr.to_json()
    names = {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    assert "qnnrt-prefetch_0" in names and threading.current_thread().name in names


def test_pool_hooks_beside_the_heap_profiler():
    tr = Tracer()
    assert pool_hooks(None, None) is None
    assert isinstance(pool_hooks(None, tr), PoolTrace)
    heap = HeapProfiler()
    assert pool_hooks(heap, None) is heap
    both = pool_hooks(heap, tr)
    assert isinstance(both, PoolObservers) and both.dsp is heap.dsp
    for _ in range(2):
        both.before_create("a")
        both.after_create("a", True, 1000)
        both.before_free("a", evicted=True)
        both.after_free("a", evicted=True)
    both.before_create("b")
    both.after_create("b", False)
    heap.close()
    events = tr.to_json()["traceEvents"]
    names = [e["name"] for e in events if e["ph"] == "X"]
    assert names == ["create a", "evict a", "re-create a", "evict a", "create b (failed)"]
    counters = [e for e in events if e["ph"] == "C"]
    assert [c["args"]["live"] for c in counters if c["name"] == "live contexts"] == [1, 0, 1, 0]
    pd = [c["args"]["pd_bytes"] for c in counters if c["name"].startswith("PD in use")]
    assert pd == [1000, 0, 1000, 0]
    heap_samples = [c for c in counters if c["name"] == "host heap (bytes)"]
    assert len(heap_samples) == len([e for e in heap.timeline() if e["event"] != "after_last_free"])
    assert heap.summary()["stats"]["creates"] == 2    # the heap profiler heard the same events
