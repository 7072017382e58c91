"""Multi-PD residency against the real simulator: contexts spread over PD worker processes, every
one resident, outputs bit-identical to one PD in this process; faults end cleanly."""
from __future__ import annotations

import dataclasses
import os
import signal
import time

import numpy as np
import pytest

import qnnrt
from qnnrt.runtime.hosts.pd.fleet import MultiPdPool
from qnnrt.runtime.hosts.pd.handle import PdWorkerError
from qnnrt.runtime.hosts.pd.remote import RemoteCall
from tests.helpers.data import EXECUTORCH
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


def test_load_progress_counts_contexts_over_every_pd(chain12):
    """Loading over two PDs reports contexts created of all 12 (this process's one by one, the
    worker's when it has started), not PDs of 2."""
    seen: list[tuple[int, int]] = []
    with qnnrt.load(chain12.model, residency="multi-pd:2",
                    options=_opts(progress=lambda done, total: seen.append((done, total)))):
        pass
    assert seen and {total for _, total in seen} == {12}
    assert seen[-1] == (12, 12) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert len(seen) > 2                               # PD 0's contexts one by one


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
        pids = [w["pid"] for w in s["pd_workers"] if not w["in_process"]]
    for a, b in zip(outs, ref + [ref[0]]):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])
    assert s["pds"] == 2 and s["creates"] == 12 and s["evictions"] == 0
    assert [w["contexts"] for w in s["pd_workers"]] == [6, 6]
    assert s["htp_cores_reported"] == 1 and "one HTP device" in s["pd_devices"]
    assert all(w["pd_reported_bytes"] == w["pd_predicted_bytes"] for w in s["pd_workers"])
    local, remote = s["pd_workers"]   # PD 0 is this process's own; PD 1 a worker
    assert local["in_process"] and local["pid"] == os.getpid() and local["graph_calls"] is None
    assert remote["graph_calls"] == 4 * 6 and remote["channel_us_per_call"] > 0
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


@pytest.fixture(scope="module")
def two_method_two_pd(tmp_path_factory, distinct_binaries):
    """Methods 'first' (a -> b) and 'second' (b -> a): both contexts shared by both methods, one
    per PD under multi-pd:2 (so 'b' lives in a worker)."""
    import json
    import shutil
    from onnx import TensorProto, helper
    from tests.helpers.program_fixtures import epcontext_node, save_model
    d = tmp_path_factory.mktemp("twomethod2pd")
    (d / "contexts").mkdir()
    bins = dict(zip("ab", distinct_binaries[:2]))
    for c, b in bins.items():
        shutil.copyfile(b.path, d / "contexts" / f"{c}.bin")
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, WIDTH]) for n in ("x", "y")]
    for name, (one, two) in (("first", "ab"), ("second", "ba")):
        save_model([epcontext_node(bins[one].graphs[0], f"contexts/{one}.bin", ["x"], ["t"]),
                    epcontext_node(bins[two].graphs[0], f"contexts/{two}.bin", ["t"], ["y"])],
                   io[:1], io[1:], d / f"{name}.onnx")
    (d / "program.json").write_text(json.dumps({
        "format": "qnnrt-program", "version": 1, "target": {"soc_model": 43},
        "methods": [{"name": m, "model": f"{m}.onnx"} for m in ("first", "second")],
        "contexts": [{"name": c, "path": f"contexts/{c}.bin",
                      "size": (d / "contexts" / f"{c}.bin").stat().st_size,
                      "graphs": list(b.graphs)} for c, b in bins.items()]}))
    return d


def test_two_methods_sharing_contexts_across_pds(two_method_two_pd):
    x = _x(3)
    with qnnrt.load(two_method_two_pd, residency="lazy") as p:
        ref = {m: p.run(m, x) for m in ("first", "second")}
    with qnnrt.load(two_method_two_pd, residency="multi-pd:2",
                    options=qnnrt.LoadOptions(pd_budget=1 << 30)) as p:
        got = [(m, p.run(m, x)) for m in ("second", "first", "second", "first")]
        s = p.pool.summary()
    assert s["creates"] == 2 and s["pds"] == 2
    local, remote = s["pd_workers"]
    assert local["in_process"] and not remote["in_process"] and remote["contexts"] == 1
    assert remote["graph_calls"] == 4   # 'b' ran in the worker for both methods, twice each
    for m, out in got:
        assert np.array_equal(out["y"], ref[m]["y"])


def test_worker_that_cannot_create_fails_the_load(chain12, monkeypatch, tmp_path):
    """A worker whose context cannot be created (here: its file vanished after the main process
    read it) fails the load with the worker's error, before any run, and no worker is left."""
    real = MultiPdPool.worker_config

    def vanished(self, w, log_level):
        cfg = real(self, w, log_level)
        key = w.keys[-1]
        return dataclasses.replace(cfg, binaries={**cfg.binaries, key: str(tmp_path / "gone.bin")})
    monkeypatch.setattr(MultiPdPool, "worker_config", vanished)
    before = set(_children())
    with pytest.raises(PdWorkerError) as ei:
        qnnrt.load(chain12.model, residency="multi-pd:2", options=_opts()).close()
    assert "PD 1" in str(ei.value) and "creating its 6 context(s)" in str(ei.value)
    assert "gone.bin" in str(ei.value)
    assert _gone_soon([p for p in _children() if p not in before])


def test_pd_zero_that_cannot_create_fails_the_load(chain_pd):
    """A budget far above the real PD puts all 400 contexts on PD 0 (this process), which cannot
    create them all: the load fails with QNN's PD error, and no worker is left."""
    before = set(_children())
    with pytest.raises(qnnrt.QnnrtError) as ei:
        qnnrt.load(chain_pd.model, residency="multi-pd:1",
                   options=qnnrt.LoadOptions(pd_budget="1TB")).close()
    assert "PD" in str(ei.value)
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
    assert sorted(d["processes"]) == ["pd1"]   # PD 0 is this process's own
    for r in (d, d["processes"]["pd1"]):  # each PD's own timeline: 6 creates, 6 frees, none live
        assert r["stats"]["creates"] == 6 and r["stats"]["frees"] == 6 and r["stats"]["live"] == 0
    lines = heap.read_text().splitlines()
    before = int(lines[0].rsplit(",", 1)[1])
    worker = d["processes"]["pd1"]["before_context_created"]
    assert before == d["before_context_created"] > worker > 0   # this process's plus the worker's
    assert "summed over this process and 1 PD worker" in d["file_source"]
    own = d["this_process"]                    # PD 0's own figures, kept beside the sum (the plot's PD 0 panel)
    assert own["before_context_created"] + worker == before
    assert own["after_context_freed"] + d["processes"]["pd1"]["after_context_freed"] == d["after_context_freed"]


def test_beyond_max_pds_each_pd_evicts(chain12):
    """12 contexts of 10.5 MB under a 32 MiB budget need 5 PDs; with at most 2, each PD holds 6
    and evicts as one PD does: outputs unchanged, no failed creation."""
    x = _x(5)
    with qnnrt.load(chain12.model, residency="lazy") as p:
        ref = p.run(None, x)
    with qnnrt.load(chain12.model, residency="auto",
                    options=qnnrt.LoadOptions(pd_budget="32MiB", max_pds=2)) as p:
        assert isinstance(p.pool, MultiPdPool) and p.pool.placement.evicting == [0, 1]
        outs = [p.run(None, x) for _ in range(2)]
        s = p.pool.summary()
    for o in outs:
        assert all(np.array_equal(o[k], ref[k]) for k in ref)
    assert s["pds"] == 2 and s["evictions"] > 0 and s["creates"] > 12
    assert all(w["evicting"] for w in s["pd_workers"])


def test_portable_channel_gives_the_same_outputs(chain12, monkeypatch):
    """The fallback transport (a multiprocessing connection, what Windows uses) on this machine."""
    from qnnrt.runtime.ipc import child
    x = _x(7)
    with qnnrt.load(chain12.model, residency="lazy") as p:
        ref = p.run(None, x)
    monkeypatch.setattr(child, "use_pipes", lambda: False)
    with qnnrt.load(chain12.model, residency="multi-pd:2", options=_opts()) as p:
        assert isinstance(p.pool.workers[0].channel.end, child.ConnEnd)
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
    from qnnrt.runtime.method_spec import QnnStep
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
            c = p.hosts.bound_call(s.key, spec)
            nxt = p.buffer(tuple(spec.outputs[0].shape), spec.outputs[0].dtype)
            c.set_input(0, cur)
            c.set_output(0, nxt)
            calls.append(c)
            cur = nxt
        remote = [c for c in calls if isinstance(c, RemoteCall)]
        for s, c in zip(steps, calls):
            if c not in remote:  # PD 0's graphs: called in this process on the live handle
                c.point_at(p.pool.acquire(s.key).graph(s.graph))
            c()
        assert all(c.staged == 0 for c in remote)   # arena-bound: no staging copy
        assert len(remote) == 6 and {c.worker.index for c in remote} == {1}
        out = cur.copy()
    assert out.dtype == ref.dtype and np.array_equal(out.reshape(ref.shape), ref)


def test_every_worker_votes_as_the_main_process_does(chain12):
    """RPC latency and polling are per process: each worker makes the program's vote, follows a
    per-run override and its end, and reports how the backend answered."""
    opts = _opts(performance_mode="burst")
    with qnnrt.load(chain12.model, residency="multi-pd:3", options=opts) as p:
        p.run(None, _x(0))
        before = [w["performance"] for w in p.pool.summary()["pd_workers"][1:]]
        with p.performance.override("balanced"):
            p.run(None, _x(0))
        after = [w["performance"] for w in p.pool.summary()["pd_workers"][1:]]
        main_calls = len(p.performance.vote.calls)
    assert len(before) == 2
    for b, a in zip(before, after):
        assert b["mode"] == "burst" and b["unavailable"] is None
        assert b["accepted"] == b["calls"] > 0       # the simulator accepts valid votes
        assert a["accepted"] == a["calls"] > b["calls"]   # the override and its end, voted there too
        assert a["calls"] == main_calls   # the same calls as this process made
    with qnnrt.load(chain12.model, residency="multi-pd:2", options=_opts()) as p:
        assert p.pool.summary()["pd_workers"][1]["performance"]["calls"] == 0  # default: no vote


def test_execution_profile_covers_the_workers_graphs(chain12):
    """A profiled multi-PD run: each worker records its graphs into a QNN profile of its own and
    sends each call's events back, so every graph has its own QNN time (not PD 0's events again)."""
    from qnnrt.profiling.exec_profile import ExecutionProfiler
    prof = ExecutionProfiler("basic")
    x = [_x(i) for i in range(2)]
    with qnnrt.load(chain12.model, residency="lazy") as p:
        ref = [p.run(None, f) for f in x]
    opts = _opts(profile_level="basic", exec_profiler=prof)
    with qnnrt.load(chain12.model, residency="multi-pd:2", options=opts) as p:
        outs = [p.run(None, f) for f in x]
        plan = p.plan()
        calls = [s.binding.call for s in plan.graph_steps]   # type: ignore[attr-defined]
        remote = [c for c in calls if isinstance(c, RemoteCall)]
    assert all(np.array_equal(o[k], r[k]) for o, r in zip(outs, ref) for k in r)
    assert len(remote) == 6
    graphs = prof.to_json()["graphs"]
    assert len(graphs) == 12 and all(g["executions"] == 2 for g in graphs)
    assert all(g["records_without_qnn_time"] == 0 and g["qnn_us"]["count"] == 2 for g in graphs)


@pytest.mark.parametrize("code, recreated", [(1100, "context"), (1011, "backend")])
def test_transient_failures_in_every_pd_are_recovered(chain12, fault_shim, monkeypatch, code,
                                                      recreated):
    """The 8th graphExecute of each process fails (iteration 2, the 2nd graph of each PD): PD 0
    re-creates in this process, the worker in its own (1011, the DSP restarted: every PD's backend
    and contexts), under the one budget of the program; the outputs are those of a clean run."""
    xs = [_x(i) for i in range(3)]
    with qnnrt.load(chain12.model, residency="lazy") as p:
        ref = [p.run(None, x) for x in xs]
    monkeypatch.setenv("QNNRT_FAULT_REAL", str(fault_shim.real))
    monkeypatch.setenv("QNNRT_FAULT_EXEC", f"8:{code}")   # read by the worker too (per process)
    fault_shim.counter().qnnrt_fault_reset()   # this process's count starts again
    with qnnrt.load(chain12.model, residency="multi-pd:2", backend_lib=fault_shim.folder,
                    options=_opts(vet=False)) as p:
        got = [p.run(None, x) for x in xs]
        recs = p.recovery.records
        local, remote = p.pool.local.keys, p.pool.workers[0].keys
        s = p.pool.summary()
    for a, b in zip(got, ref):
        assert all(np.array_equal(a[k], b[k]) for k in b)
    assert [(r.code, r.recreated, r.iteration, r.succeeded) for r in recs] == \
        [(code, recreated, 1, True)] * 2
    assert recs[0].context == local[1] and recs[1].context == remote[1]
    if recreated == "backend":   # a DSP restart: every PD on the device, this process's and the worker's
        assert all(sorted(r.contexts) == sorted(local + remote) for r in recs)
    else:
        assert [r.contexts for r in recs] == [[local[1]], [remote[1]]]
    assert s["failure"] is None and s["pds"] == 2


def test_recovery_budget_is_one_for_all_pds(chain12, fault_shim, monkeypatch):
    """Every call in the worker fails (this process's calls do not): recovery re-creates there
    until the program's budget is used up, then raises the clean RecoveryError naming the graph."""
    monkeypatch.setenv("QNNRT_FAULT_REAL", str(fault_shim.real))
    monkeypatch.setenv("QNNRT_FAULT_EXEC", "1-")
    with qnnrt.load(chain12.model, residency="multi-pd:2", backend_lib=fault_shim.folder,
                    options=_opts(vet=False, max_recoveries=2)) as p:
        monkeypatch.delenv("QNNRT_FAULT_EXEC")   # the worker has its copy of the environment
        with pytest.raises(qnnrt.RecoveryError) as ei:
            p.run(None, _x(0))
        recs = p.recovery.records
        remote = p.pool.workers[0].keys
    assert [(r.context, r.recreated, r.succeeded) for r in recs] == \
        [(remote[0], "context", False), (remote[0], "contexts", False)]
    assert "1100" in str(ei.value) and "budget" in str(ei.value)


def test_a_backend_restart_keeps_profiling_and_the_vote(chain12, fault_shim, monkeypatch):
    """1011 restarts every PD's backend, which closes the profile and the power vote it owned:
    both are made again before the failed call runs again, in this process and in the worker, so
    the profiled run goes on and every graph keeps its QNN time."""
    from qnnrt.profiling.exec_profile import ExecutionProfiler
    monkeypatch.setenv("QNNRT_FAULT_REAL", str(fault_shim.real))
    monkeypatch.setenv("QNNRT_FAULT_EXEC", "8:1011")
    fault_shim.counter().qnnrt_fault_reset()
    prof = ExecutionProfiler("basic")
    opts = _opts(vet=False, profile_level="basic", exec_profiler=prof, performance_mode="burst")
    with qnnrt.load(chain12.model, residency="multi-pd:2", backend_lib=fault_shim.folder,
                    options=opts) as p:
        for i in range(3):
            p.run(None, _x(i))
        assert [r.recreated for r in p.recovery.records] == ["backend", "backend"]
        worker_votes = p.pool.summary()["pd_workers"][1]["performance"]
        assert p.performance.vote.active and p.performance.vote.calls   # a new id, voted
    assert worker_votes["active"] and worker_votes["accepted"] == worker_votes["calls"] > 0  # voted again
    graphs = prof.to_json()["graphs"]
    assert len(graphs) == 12 and all(g["records_without_qnn_time"] == 0 for g in graphs)


def test_pd_zero_evicts_beside_another_programs_contexts(chain12):
    """PD 0 is this process's PD, which another program's 12 live contexts already use: its group
    does not fit beside them under the budget, so PD 0 evicts instead of failing the load; the
    worker's PD is its own and keeps every context resident."""
    x = _x(9)
    with qnnrt.load(chain12.model, residency="eager") as other:
        ref = other.run(None, x)
        opts = qnnrt.LoadOptions(pd_budget="160MiB")
        with qnnrt.load(chain12.model, residency="multi-pd:2", options=opts) as p:
            outs = [p.run(None, x) for _ in range(2)]
            local, remote = p.pool.summary()["pd_workers"]
    assert all(np.array_equal(o[k], ref[k]) for o in outs for k in ref)
    assert local["evicting"] and local["evictions"] > 0 and local["creates"] > 6
    assert remote["evictions"] == 0 and remote["creates"] == 6


def test_another_thread_reads_and_votes_while_runs_go_through_the_workers(chain12):
    """A second thread reads every public state of a multi-PD program in a loop (summary, the
    per-PD figures, recovery, performance, progress counters) and makes performance overrides
    (votes go down the workers' channels) while the main thread runs: no error, no hang, and the
    outputs equal one PD's. Before the channel matched replies to requests, the summary's reply
    was taken for a graph call's and the run failed or hung."""
    import threading
    xs = [_x(i) for i in range(2)]
    with qnnrt.load(chain12.model, residency="lazy") as p:
        ref = [p.run(None, x) for x in xs]
    errors: list[BaseException] = []
    reads = [0]
    with qnnrt.load(chain12.model, residency="multi-pd:3",
                    options=_opts(performance_mode="burst")) as p:
        assert isinstance(p.pool, MultiPdPool) and len(p.pool.workers) == 2
        running = threading.Event()
        stop = threading.Event()

        def reader() -> None:
            running.wait(30)
            while not stop.is_set():
                try:
                    s = p.pool.summary()
                    assert s["creates"] == 12 and len(s["pd_workers"]) == 3
                    p.recovery.summary()
                    assert p.graph_calls >= 0 and p.iterations >= 0
                    if reads[0] % 25 == 0:
                        with p.performance.override("balanced"):
                            p.performance.to_json()
                    reads[0] += 1
                except BaseException as e:  # noqa: BLE001 - reported by the main thread
                    errors.append(e)
                    return
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        outs = []
        try:
            running.set()
            for i in range(40):
                outs.append(p.run(None, xs[i % 2]))
        finally:
            stop.set()
            t.join(60)
        assert not t.is_alive() and not errors, errors
        calls = [w["graph_calls"] for w in p.pool.summary()["pd_workers"][1:]]
    assert reads[0] > 40, reads      # the reader really ran beside the runs
    assert calls == [40 * 4, 40 * 4]
    for i, out in enumerate(outs):
        for k in out:
            assert np.array_equal(out[k], ref[i % 2][k])


MANY4 = EXECUTORCH / "many_4_fp16"


def _many4(tmp_path) -> tuple[str, np.ndarray]:
    """The ExecuTorch-made chain of 4 delegates with a CPU `aten::mm` between each pair."""
    return str(MANY4 / "model.pte"), np.load(MANY4 / "forward_input_0.npy")


def test_a_pd_runs_its_part_of_the_plan_on_one_request(tmp_path):
    """Delegates 3-4 and the CPU matmul between them live in PD 1: each iteration is one round trip
    to that worker (the host changes once there and back), whatever the steps inside; outputs are
    bit-identical to one PD, on the compiled plan and on the reference path."""
    pte, x = _many4(tmp_path)
    with qnnrt.load(pte, residency="lazy") as p:
        ref = p.run(None, [x])
    with qnnrt.load(pte, residency="multi-pd:2", options=_opts()) as p:
        outs = [p.run(None, [x]) for _ in range(5)]
        s = p.pool.summary()
    local, remote = s["pd_workers"]
    assert (local["contexts"], remote["contexts"]) == (2, 2)
    assert remote["round_trips"] == 5 and remote["graph_calls"] == 10
    for out in outs:
        assert all(np.array_equal(out[k], ref[k]) for k in ref)


def test_a_transient_failure_inside_a_segment_resumes_there(tmp_path, fault_shim, monkeypatch):
    """The worker's 3rd graphExecute (iteration 2, the segment's first graph) fails with 1100:
    recovery re-creates that context in the worker and the segment's run resumes at that step;
    the outputs are a clean run's."""
    pte, x = _many4(tmp_path)
    with qnnrt.load(pte, residency="lazy") as p:
        ref = p.run(None, [x])
    monkeypatch.setenv("QNNRT_FAULT_REAL", str(fault_shim.real))
    monkeypatch.setenv("QNNRT_FAULT_EXEC", "3:1100")
    fault_shim.counter().qnnrt_fault_reset()
    with qnnrt.load(pte, residency="multi-pd:2", backend_lib=fault_shim.folder,
                    options=_opts(vet=False)) as p:
        monkeypatch.delenv("QNNRT_FAULT_EXEC")   # this process's calls do not fail
        outs = [p.run(None, [x]) for _ in range(3)]
        recs = p.recovery.records
        remote = p.pool.workers[0].keys
        s = p.pool.summary()
    assert [(r.code, r.recreated, r.context, r.iteration, r.succeeded) for r in recs] == \
        [(1100, "context", remote[0], 1, True)]
    assert s["pd_workers"][1]["graph_calls"] == 6    # the failed call is not counted twice
    for out in outs:
        assert all(np.array_equal(out[k], ref[k]) for k in ref)


def test_a_worker_killed_inside_a_segment_names_the_graph(tmp_path):
    pte, x = _many4(tmp_path)
    with qnnrt.load(pte, residency="multi-pd:2", options=_opts()) as p:
        p.run(None, [x])
        w = p.pool.workers[0]
        os.kill(w.pid, signal.SIGKILL)
        w.proc.wait()
        with pytest.raises(PdWorkerError) as ei:
            p.run(None, [x])
        pid = w.pid
    msg = str(ei.value)
    assert "PD 1" in msg and "killed by SIGKILL" in msg and "a plan segment of 2 graph call(s)" in msg
    assert _gone_soon([pid])


def test_progress_counts_the_graph_calls_of_a_segment_still_running(tmp_path, fault_shim, monkeypatch):
    """A worker's part of an iteration can take minutes (seed-000 at sequence 1024): while its
    segment runs, `graph_calls` counts the calls it made so far, read from the worker's
    status block by another thread."""
    import threading
    pte, x = _many4(tmp_path)
    monkeypatch.setenv("QNNRT_FAULT_REAL", str(fault_shim.real))
    monkeypatch.setenv("QNNRT_FAULT_SLEEP_MS", "400")   # each graph call in the worker: 0.4 s
    with qnnrt.load(pte, residency="multi-pd:2", backend_lib=fault_shim.folder,
                    options=_opts(vet=False)) as p:
        monkeypatch.delenv("QNNRT_FAULT_SLEEP_MS")
        seen: list[int] = []
        t = threading.Thread(target=lambda: p.run(None, [x]))
        t.start()
        while t.is_alive():
            seen.append(p.graph_calls)
            time.sleep(0.02)
        t.join()
        assert p.graph_calls == 4
    # PD 0's two calls, then the worker's first one counted while its second still runs
    assert 3 in seen and seen == sorted(seen), seen


def test_onnx_runtime_cpu_segments_travel_with_their_pd(chain12):
    """An EPContext program with an ONNX Runtime CPU segment between each pair of graphs: the
    worker runs its six graphs and the CPU segments between them on one request per iteration
    (the CPU segments went with it), outputs bit-identical to one PD."""
    xs = [_x(i) for i in range(3)]
    with qnnrt.load(chain12.model, residency="lazy") as p:
        ref = [p.run(None, x) for x in xs]
    with qnnrt.load(chain12.model, residency="multi-pd:2", options=_opts()) as p:
        outs = [p.run(None, x) for x in xs]
        remote = p.pool.summary()["pd_workers"][1]
    assert (remote["graph_calls"], remote["round_trips"]) == (3 * 6, 3)
    for a, b in zip(outs, ref):
        assert all(np.array_equal(a[k], b[k]) for k in b)
