"""Shared buffers (graph I/O in rpcmem, registered with memRegister, bound as mem handles) run here
through the emulation of tests/helpers/mem_shim.py: an emulated libcdsprpc that qnnrt finds through
QNNRT_CDSPRPC_LIB, and a QNN shim in front of the real simulator that implements memRegister /
memDeRegister and hands graphExecute the registered memory as client buffers. Outputs must be bit
for bit the raw path's; the shim's counters say what was registered, bound and deregistered."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qnnrt
from qnnrt.core import Backend, ContextBinary
from qnnrt.core.context import Context
from qnnrt.core.shared_buffer import SharedMemory
from tests.helpers.data import LLM_STORIES, executorch_pte

MANY = executorch_pte("many_4_fp16")
RUNS = 3


@pytest.fixture
def emulated(mem_shim, monkeypatch):
    """This test's process sees the emulation: the libcdsprpc it finds and the shim's real library."""
    for k, v in mem_shim.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("QNNRT_MEM_SHIM_REFUSE", raising=False)
    return mem_shim


def _feeds(method, runs: int = RUNS) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = []
    for _ in range(runs):
        feed = {}
        for s in method.inputs:
            shape = [d or 1 for d in s.shape]
            x = rng.standard_normal(shape) * 2
            feed[s.name] = (x.astype(s.dtype) if np.dtype(s.dtype).kind == "f"
                            else rng.integers(0, 255, shape).astype(s.dtype))
        out.append(feed)
    return out


def _run(path: Path, feeds_of, **options) -> tuple[list[dict], dict, int]:
    """Outputs of each run, the program's shared-buffer report and its graph tensors per call."""
    with qnnrt.load(path, options=qnnrt.LoadOptions(vet=False, **options)) as prog:
        m = prog.method()
        outs = [prog.run(m.name, f) for f in feeds_of(m)]
        tensors = sum(len(g.inputs) + len(g.outputs) for b in prog.binaries.values()
                      for g in b.graphs)
    return outs, prog.performance.to_json(), tensors   # after close: the deregistrations too


def _delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in after}


def _identical(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k], equal_nan=True), k


def _assert_bound_and_freed(d: dict, report: dict, registrations: int, executes: int,
                            tensors_per_run: int) -> None:
    """What the shim saw: `registrations` memRegisters, all deregistered before contextFree, every
    tensor of every call a mem handle; every rpcmem block freed."""
    sb = report["shared_buffers"]
    assert sb["asked"] and sb["on"] and sb["why"] == "" and report["notes"] == []
    assert d["registered"] == registrations == sb["registered"]
    assert d["deregistered"] == registrations == sb["deregistered"]
    assert d["freed_with_live"] == 0 and d["live"] == 0
    assert d["executes_with_handles"] == executes
    assert d["bound_tensors"] == RUNS * tensors_per_run
    assert d["rpcmem_allocs"] == d["rpcmem_frees"] == sb["buffers"] > 0 and d["rpcmem_live"] == 0


def test_a_pte_runs_on_shared_buffers_bit_identical_registered_once(emulated):
    raw, _, _ = _run(MANY, _feeds)
    before = emulated.counts()
    shared, report, tensors = _run(MANY, _feeds, shared_buffer=True,
                                   backend_lib=str(emulated.folder))
    _identical(raw, shared)
    # eager: each context registers each of its graph tensors once, for all the runs
    _assert_bound_and_freed(_delta(emulated.counts(), before), report, registrations=tensors,
                            executes=RUNS * 4, tensors_per_run=tensors)
    assert "shared buffers on" in report["summary"]


def test_a_quantized_bin_runs_on_shared_buffers_bit_identical(emulated, q8_binary):
    """Raw fixed-point outputs (dequantized after the call) and per-call inputs (staged) included."""
    raw, _, _ = _run(q8_binary.path, _feeds)
    before = emulated.counts()
    shared, report, tensors = _run(q8_binary.path, _feeds, shared_buffer=True,
                                   backend_lib=str(emulated.folder))
    _identical(raw, shared)
    assert shared[0]["yq"].dtype == np.float32 and np.any(shared[0]["yq"] > 0)
    _assert_bound_and_freed(_delta(emulated.counts(), before), report, registrations=tensors,
                            executes=RUNS, tensors_per_run=tensors)


def test_an_epcontext_program_with_cpu_ops_under_eviction_registers_per_creation(emulated, chain12):
    """Planned buffers shared by graphs and ONNX Runtime CPU ops; bounded residency re-creates
    contexts every run, and each creation registers its tensors again (the old handles went with
    the old context, deregistered before contextFree)."""
    def feeds(m):
        return [{"x": np.full((1, 64), v, np.float32)} for v in (0.5, -1.0, 2.0)]
    raw, _, _ = _run(chain12.model, feeds, residency="bounded:4")
    before = emulated.counts()
    with qnnrt.load(chain12.model, options=qnnrt.LoadOptions(
            vet=False, residency="bounded:4", shared_buffer=True,
            backend_lib=str(emulated.folder))) as prog:
        shared = [prog.run(prog.method().name, f) for f in feeds(prog.method())]
        creations = prog.pool.summary()["creates"]
    report = prog.performance.to_json()
    _identical(raw, shared)
    d = _delta(emulated.counts(), before)
    assert creations > 12   # evicted and created again
    # two tensors per context, registered when a creation is first called (the shim refuses a
    # handle of another context, so every call was bound to its live context's); the last
    # prefetch may be created and never called
    used = d["registered"] // 2
    assert d["registered"] % 2 == 0 and creations - 1 <= used <= creations
    _assert_bound_and_freed(d, report, registrations=2 * used, executes=RUNS * 12,
                            tensors_per_run=2 * 12)


def test_the_reference_path_graph_execute_uses_shared_buffers_too(emulated):
    raw, _, _ = _run(MANY, _feeds)
    before = emulated.counts()
    with qnnrt.load(MANY, options=qnnrt.LoadOptions(vet=False, shared_buffer=True,
                                                    backend_lib=str(emulated.folder))) as prog:
        prog.compiled = False
        shared = [prog.run(prog.method().name, f) for f in _feeds(prog.method())]
    _identical(raw, shared)
    d = _delta(emulated.counts(), before)
    assert d["executes_with_handles"] == RUNS * 4 and d["freed_with_live"] == 0
    assert d["registered"] == d["deregistered"] > 0 and d["rpcmem_live"] == 0


def test_core_graph_execute_with_shared_memory_deregisters_at_context_close(emulated, q8_binary):
    be = Backend(backend_lib=str(emulated.folder))
    memory = SharedMemory(be)
    try:
        with ContextBinary(q8_binary.path) as b:
            ctx = Context(be, b)
            g = ctx.graph(b.graphs[0].name)
            x = np.arange(64, dtype=np.uint8).reshape(1, 64)
            before = emulated.counts()
            want = g.execute([x])
            got = [g.execute([x], shared=memory) for _ in range(2)]
            mid = _delta(emulated.counts(), before)
            assert mid["registered"] == 2 and mid["executes_with_handles"] == 2   # once, used twice
            for out in got:
                assert out.keys() == want.keys() and np.array_equal(out["yq"], want["yq"])
            assert got[0]["yq"] is not got[1]["yq"]   # fresh arrays per call, as without
            ctx.close()
            d = _delta(emulated.counts(), before)
            assert d["deregistered"] == 2 and d["freed_with_live"] == 0
            assert d["rpcmem_frees"] == d["rpcmem_allocs"] == 2   # the graph's staging, given back
    finally:
        memory.close()
        be.close()


def test_a_refused_memregister_falls_back_to_raw_buffers_with_one_note(emulated, monkeypatch,
                                                                       caplog):
    monkeypatch.setenv("QNNRT_MEM_SHIM_REFUSE", "1")
    raw, _, _ = _run(MANY, _feeds)
    before = emulated.counts()
    with caplog.at_level("WARNING", logger="qnnrt.core"):
        shared, report, _ = _run(MANY, _feeds, shared_buffer=True,
                                 backend_lib=str(emulated.folder))
    _identical(raw, shared)
    d = _delta(emulated.counts(), before)
    assert d["registered"] == 0 and d["executes_with_handles"] == 0   # raw client buffers
    assert d["rpcmem_allocs"] == d["rpcmem_frees"] > 0 and d["rpcmem_live"] == 0
    sb = report["shared_buffers"]
    assert sb["asked"] and not sb["on"] and "memRegister refused" in sb["why"]
    assert "8005" in sb["why"] and "raw buffers" in sb["why"]
    assert [n for n in report["notes"] if "shared buffers" in n] == [
        f"shared buffers asked for but off: {sb['why']}"]
    assert len([r for r in caplog.records if "memRegister refused" in r.getMessage()]) == 1


def test_the_real_simulator_refuses_memregister_and_the_program_falls_back(emulated, monkeypatch):
    """The emulated libcdsprpc without the shim: the simulator's own memRegister says 1000."""
    raw, _, _ = _run(MANY, _feeds)
    shared, report, _ = _run(MANY, _feeds, shared_buffer=True)
    _identical(raw, shared)
    sb = report["shared_buffers"]
    assert not sb["on"] and "memRegister refused" in sb["why"] and "1000" in sb["why"]


def test_without_libcdsprpc_the_option_is_off_with_why(monkeypatch):
    monkeypatch.delenv("QNNRT_CDSPRPC_LIB", raising=False)
    raw, _, _ = _run(MANY, _feeds)
    shared, report, _ = _run(MANY, _feeds, shared_buffer=True)
    _identical(raw, shared)
    sb = report["shared_buffers"]
    assert sb["asked"] and not sb["on"] and "no libcdsprpc" in sb["why"]
    assert f"shared buffers asked for but off: {sb['why']}" in report["notes"]


def test_an_explicit_libcdsprpc_that_is_not_there_is_the_only_place_looked(monkeypatch, tmp_path):
    monkeypatch.setenv("QNNRT_CDSPRPC_LIB", str(tmp_path))
    ok, why = SharedMemory.available()
    assert not ok and str(tmp_path / "libcdsprpc.so") in why and "QNNRT_CDSPRPC_LIB" in why


def test_qnnrt_run_shared_buffer_reports_it_on_and_writes_the_raw_paths_outputs(mem_shim, tmp_path,
                                                                                 monkeypatch):
    import json

    from tests.helpers.cli_helpers import qnnrt as cli
    for k, v in mem_shim.env().items():
        monkeypatch.setenv(k, v)
    runs = {}
    for name, extra in (("raw", []), ("shared", ["--shared-buffer", "--backend-lib",
                                                 str(mem_shim.folder)])):
        out = tmp_path / name
        r = cli("run", MANY, "--iteration", "2", "--output-dir", out, "--report",
                tmp_path / f"{name}.json", *extra)
        assert r.returncode == 0, r.stderr
        runs[name] = (r.stdout, json.loads((tmp_path / f"{name}.json").read_text()),
                      {p.name: np.load(p) for p in out.glob("*.npy")})
    stdout, report, outs = runs["shared"]
    sb = report["performance"]["shared_buffers"]
    assert sb["on"] and sb["registered"] == sb["deregistered"] > 0
    assert "shared buffers on" in stdout and "note: shared buffers" not in stdout
    assert outs.keys() == runs["raw"][2].keys() and outs
    for k in outs:
        assert np.array_equal(outs[k], runs["raw"][2][k])


@pytest.mark.parametrize("refuse", [False, True])
def test_doctor_probe_registers_one_buffer_or_says_why_not(mem_shim, monkeypatch, refuse):
    from qnnrt.core.device_info import performance_features_offered
    for k, v in mem_shim.env(refuse=refuse).items():
        monkeypatch.setenv(k, v)
    if not refuse:
        monkeypatch.delenv("QNNRT_MEM_SHIM_REFUSE", raising=False)
    from qnnrt.executorch.reader import qnn_context_binary, read_pte
    be, pte = Backend(backend_lib=str(mem_shim.folder)), read_pte(MANY)
    try:
        users = next(iter(pte.unique_delegate_blobs().values()))
        before = mem_shim.counts()
        with ContextBinary(buffer=qnn_context_binary(users[0]), name="d0", lib=be.lib) as b:
            got = performance_features_offered(be, b)["shared buffers"]
        d = _delta(mem_shim.counts(), before)
    finally:
        be.close()
        pte.close()
    assert got["offered"] is (not refuse)
    assert ("memRegister refused" in got["detail"]) is refuse
    assert d["registered"] == d["deregistered"] == (0 if refuse else 1)
    assert d["rpcmem_allocs"] == d["rpcmem_frees"] == 1



def test_multi_pd_programs_keep_raw_buffers_and_say_why(emulated, chain12):
    """PD workers' graph calls read the shared arena, not rpcmem: shared buffers are off there."""
    from qnnrt.runtime.performance import MULTI_PD_NO_SHARED_BUFFERS

    def feeds(m):
        return [{"x": np.full((1, 64), 0.25, np.float32)}]
    raw, _, _ = _run(chain12.model, feeds)
    before = emulated.counts()
    shared, report, _ = _run(chain12.model, feeds, residency="multi-pd:2", pd_budget="3.4GiB",
                             shared_buffer=True, backend_lib=str(emulated.folder))
    _identical(raw, shared)
    d = _delta(emulated.counts(), before)
    sb = report["shared_buffers"]
    assert sb["asked"] and not sb["on"] and sb["why"] == MULTI_PD_NO_SHARED_BUFFERS
    assert d["registered"] == 0 and d["rpcmem_live"] == 0


FIX = LLM_STORIES


@pytest.mark.slow
def test_llm_decode_on_shared_buffers_fuses_the_caches_and_equals_the_raw_path(emulated):
    """The prepared LLM step in rpcmem: the caches (and the new-entry outputs) are one block per
    kind, each layer's view registered at its offset (the HTP shared-buffer descriptor), so one
    copy writes a token's entries of every layer; tokens and logits bit for bit the raw path's."""
    import json

    from qnnrt.llm import LlmRunner
    prompt = json.loads((FIX / "meta.json").read_text())["prompt"]
    runs = {}
    before = emulated.counts()
    for name, opts in (("raw", {}), ("shared", {"shared_buffer": True, "backend_lib": str(emulated.folder)})):
        with qnnrt.load(FIX / "model.pte", options=qnnrt.LoadOptions(vet=False, **opts)) as prog:
            runner = LlmRunner(prog)
            cache = runner.new_cache()
            res = runner.generate(prompt, 12, eos_ids=[], keep_logits=True, cache=cache)
            if name == "shared":
                sm = prog.shared_memory
                assert sm is not None and cache.k_all is not None and cache.v_all is not None
                assert all(sm.holds(a) for a in (cache.k_all, cache.v_all, *cache.k, *cache.v))
                counts = sm.counts()
        runs[name] = res
    d = _delta(emulated.counts(), before)
    assert runs["shared"].tokens == runs["raw"].tokens
    assert all(np.array_equal(a, b) for a, b in zip(runs["shared"].logits, runs["raw"].logits))
    L = runner.layout.n_layers
    # per method: the k and v caches and outputs are layer views of one block per kind, all
    # registered with the custom descriptor; those of layers 1.. at an offset
    assert d["registered_custom"] == counts["registered_views"] >= 2 * 4 * L
    assert d["registered_at_offset"] >= 2 * 4 * (L - 1)
    assert d["registered"] == d["deregistered"] > 0 and d["freed_with_live"] == 0 and d["rpcmem_live"] == 0
