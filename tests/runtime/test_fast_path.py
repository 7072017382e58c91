"""The compiled plan (qnnrt/runtime/plan.py) against the step-by-step reference path
(Program.compiled = False: Method.run -> Graph.execute)."""
from __future__ import annotations

import time

import numpy as np
import pytest

import qnnrt
from qnnrt.runtime.plan import MethodPlan
from tests.helpers.data import EXECUTORCH, LLM_STORIES, executorch_pte, large_pte
from tests.helpers.qnn_fixtures import WIDTH

POLICIES = ["eager", "lazy", "auto", "sequential", "bounded:3"]


def _feeds(m, seed=0):
    rng = np.random.default_rng(seed)
    return {s.name: rng.standard_normal([d or 1 for d in s.shape]).astype(s.dtype)
            for s in m.inputs}


def _reference(path, feeds_list, method=None):
    with qnnrt.load(path, residency="eager") as p:
        p.compiled = False
        return [p.run(method, f) for f in feeds_list]


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and np.array_equal(a[k], b[k])
        for k in a)


@pytest.mark.parametrize("policy", POLICIES)
def test_chain_bit_identical_every_policy(chain12, policy):
    x = [{"x": np.random.default_rng(i).standard_normal((1, WIDTH)).astype(np.float32)}
         for i in range(3)]
    ref = _reference(chain12.model, x)
    with qnnrt.load(chain12.model, residency=policy) as p:
        outs = [p.run(None, f) for f in x]
        again = p.run(None, x[0])
        assert isinstance(p.plan(), MethodPlan)
    for o, r in zip(outs, ref):
        assert _same(o, r)
    assert _same(again, ref[0])
    assert _same(outs[0], ref[0])  # unchanged by later runs


def test_tiny_bit_identical_every_policy(built_tiny_program):
    path = built_tiny_program.out
    with qnnrt.load(path, residency="eager") as p:
        m = p.method()
        feeds = [_feeds(m, 0), _feeds(m, 1)]
    ref = _reference(path, feeds)
    for policy in ("eager", "auto", "sequential", "bounded:8"):
        with qnnrt.load(path, residency=policy) as p:
            first = p.run(None, feeds[0])
            p.timed = True
            second = p.run(None, feeds[1])
            assert _same(first, ref[0]) and _same(second, ref[1]), policy
            assert p.timing.graph_calls == len(p.method().graph_order)
            assert p.timing.accelerator_s > 0 and p.timing.cpu_ops_s > 0


def test_results_not_aliased_and_input_outputs_copied(chain12):
    x = np.ones((1, WIDTH), np.float32)
    with qnnrt.load(chain12.model, residency="eager") as p:
        a = p.run(None, {"x": x})
        keep = {k: v.copy() for k, v in a.items()}
        b = p.run(None, {"x": x * 2})
        assert _same(a, keep)
        assert all(not np.shares_memory(a[k], b[k]) for k in a)
        assert all(not np.shares_memory(v, x) for v in b.values())


def test_prefetch_thread_does_not_wake_when_all_live(chain12):
    x = {"x": np.ones((1, WIDTH), np.float32)}
    with qnnrt.load(chain12.model, residency="auto") as p:
        for _ in range(2):
            p.run(None, x)
        wakeups, gen, prefetches = p.pool.prefetch_wakeups, p.pool.generation, p.pool.stats.prefetches
        for _ in range(20):
            p.run(None, x)
        assert p.pool.prefetch_wakeups == wakeups
        assert p.pool.stats.prefetches == prefetches
        assert p.pool.generation == gen


def test_breakdown_adds_up(chain12):
    x = {"x": np.ones((1, WIDTH), np.float32)}
    with qnnrt.load(chain12.model, residency="eager") as p:
        p.timed = True
        p.run(None, x)
        for _ in range(5):
            t0 = time.perf_counter()
            p.run(None, x)
            wall = time.perf_counter() - t0
            t = p.timing
            assert 0 < t.accelerator_s + t.cpu_ops_s <= wall
            assert t.graph_calls == 12


def _pte_cases():
    """(.pte, residency) pairs: every ExecuTorch fixture of tests/data under each policy, seed_small (the
    seed-000 model's structure: 16 layers, 65 delegates, CPU mm kernels between them; ~20 s) too."""
    return [pytest.param(pte, policy, id=f"{policy}-{pte.parent.name}")
            for pte in sorted(EXECUTORCH.glob("*/model.pte"))
            for policy in ("eager", "auto", "sequential")]


@pytest.mark.parametrize("pte, policy", _pte_cases())
def test_pte_bit_identical(pte, policy):
    _check_pte_bit_identical(pte, policy, seeds=(0, 1))


@pytest.mark.slow
def test_large_pte_bit_identical():
    """A large program (the 94 MB seed000_fits: minutes per forward pass on the simulator), when the
    environment names one: `auto` on one feed."""
    _check_pte_bit_identical(large_pte(), "auto", seeds=(0,))


def _check_pte_bit_identical(pte, policy, seeds):
    from qnnrt.executorch.plan import InterpretedPlan, PtePlan
    kinds: set = set()
    with qnnrt.load(pte, residency="eager") as p:
        names = [n for n, m in p.methods.items() if m.inputs]
        feeds = {n: [_feeds(p.methods[n], s) for s in seeds] for n in names}
    ref = {}
    with qnnrt.load(pte, residency="eager") as p:
        p.compiled = False
        ref = {n: [p.run(n, f) for f in fs] for n, fs in feeds.items()}
    with qnnrt.load(pte, residency=policy) as p:
        for n, fs in feeds.items():
            outs = [p.run(n, f) for f in fs]
            assert isinstance(p.plan(n), (PtePlan, InterpretedPlan))
            kinds.add(type(p.plan(n)).__name__)
            assert all(_same(o, r) for o, r in zip(outs, ref[n], strict=True)), n
            assert p.timing.graph_calls == len(p.methods[n].graph_order)


@pytest.mark.parametrize("policy", ["eager", "auto"])
def test_llm_pte_bit_identical(policy):
    from qnnrt.executorch.plan import PtePlan
    fix = LLM_STORIES
    with qnnrt.load(fix / "model.pte", residency=policy) as p:
        for name in p.methods:
            files = sorted((fix / "inputs").glob(f"{name}_input_*.npy"),
                           key=lambda f: int(f.stem.rsplit("_", 1)[1]))
            xs = [np.load(f) for f in files]
            got = p.run(name, xs)
            assert isinstance(p.plan(name), PtePlan)
            p.compiled = False
            ref = p.run(name, xs)
            p.compiled = True
            assert _same(got, ref), name


def test_raw_binary_graph_method_quantized_bit_identical(q8_binary):
    """A raw context binary (GraphMethod) with fixed-point I/O: one-pass float32 dequantization."""
    with qnnrt.load(q8_binary.path, residency="eager") as p:
        m = p.method()
        feeds = [_feeds(m, s) for s in (0, 1)]
        got = [p.run(None, f) for f in feeds]
        assert isinstance(p.plan(m.name), MethodPlan)
        p.compiled = False
        ref = [p.run(None, f) for f in feeds]
    assert any(s.is_fixed_point for s in p.binaries[m.steps[0].key].graph(m.steps[0].graph).outputs)
    for g, r in zip(got, ref):
        assert _same(g, r)


def test_a_profiled_run_is_the_plan_with_a_profiler(chain12):
    """Profiling attaches to the plan's graph calls; it does not switch to another path."""
    from qnnrt.profiling.exec_profile import ExecutionProfiler
    x = [{"x": np.random.default_rng(i).standard_normal((1, WIDTH)).astype(np.float32)}
         for i in range(2)]
    ref = _reference(chain12.model, x)
    prof = ExecutionProfiler("basic")
    opts = qnnrt.LoadOptions(profile_level="basic", exec_profiler=prof)
    with qnnrt.load(chain12.model, residency="lazy", options=opts) as p:
        outs = [p.run(None, f) for f in x]
        assert isinstance(p.plan(), MethodPlan)
    assert all(_same(o, r) for o, r in zip(outs, ref))
    graphs = prof.to_json()["graphs"]
    assert len(graphs) == 12 and all(g["executions"] == 2 for g in graphs)


@pytest.mark.parametrize("name", ["many_4_fp16", "two_methods_fp16", "add_relu_mul_q8"])
def test_interpreted_pte_plan_bit_identical(name):
    """The .pte plan for methods the planner does not compile (the interpreter, delegates through
    prepared graph steps), forced on methods it could compile, against the reference path."""
    from qnnrt.executorch.plan import InterpretedPlan
    pte = executorch_pte(name)
    with qnnrt.load(pte, residency="lazy") as p:
        p.timed = True
        for n, m in p.methods.items():
            feeds = [_feeds(m, s) for s in (0, 1)]
            plan = InterpretedPlan(p, m)
            got = [plan.run(f) for f in feeds]
            p.compiled = False
            ref = [p.run(n, f) for f in feeds]
            p.compiled = True
            assert all(_same(g, r) for g, r in zip(got, ref)), n
            assert plan.timing.graph_calls == len(m.graph_order) and plan.timing.accelerator_s > 0


@pytest.mark.parametrize("m, k, n", [(1, 64, 64), (1, 7, 100), (2, 64, 64), (3, 100, 7), (8, 64, 257),
                                     (64, 2, 1), (1, 1, 1), (130, 64, 64)])
def test_matmul_step_is_bit_identical_to_np_matmul(m, k, n):
    """MatmulStep computes aten::mm as ndarray.dot (cheaper per call than the matmul ufunc); the
    reference path's kernel uses np.matmul: for 2-d float32 both make the same BLAS call."""
    from qnnrt.executorch.steps import MatmulStep
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    for x in (a, np.asfortranarray(a)):
        step = MatmulStep(0, w, 1, (m, n))
        values: list = [x, None]
        step.run(values)
        assert values[1].dtype == np.float32 and np.array_equal(values[1], np.matmul(x, w))
        step.result = np.empty((m, n), np.float32)      # planned: written in place
        step.run(values)
        assert values[1] is step.result and np.array_equal(step.result, np.matmul(x, w))


def test_untimed_by_default_timed_when_asked(chain12):
    """A program does not read the clock per step unless timed; timed and untimed plans of a method
    give the same bits, each built once."""
    from qnnrt.executorch.steps import FreeStep, MatmulStep
    from qnnrt.runtime.steps import CPU, TimedStep, loop_call
    x = {"x": np.random.default_rng(7).standard_normal((1, WIDTH)).astype(np.float32)}
    with qnnrt.load(chain12.model, residency="eager") as p:
        assert not p.timed
        untimed = p.run(None, x)
        t = p.timing
        assert not t.timed and t.accelerator_s == t.cpu_ops_s == 0.0 and t.graph_calls == 12
        p.timed = True
        timed = p.run(None, x)
        assert p.timing.timed and p.timing.accelerator_s > 0 and p.timing.cpu_ops_s > 0
        assert _same(untimed, timed)
        plan = p.plan()
        p.timed = False
        assert p.plan() is not plan and p.run(None, x).keys() == untimed.keys()
        p.timed = True
        assert p.plan() is plan
    mm = MatmulStep(0, np.eye(2, dtype=np.float32), 1, (1, 2))
    run, kind, step = loop_call(mm, timed=True)
    assert kind == CPU and step is mm and isinstance(run.__self__, TimedStep)
    free = FreeStep(3)
    assert loop_call(free, timed=True)[0] == free.run     # bookkeeping is not an op: not timed
    assert loop_call(mm, timed=False)[0] == mm.run
