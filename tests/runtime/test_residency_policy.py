"""The residency pool's decisions and bookkeeping: evictions within one of Belady's optimum,
prefetch hits, no pinned contexts after an exception, closes that race a run, fds per binary."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qnnrt
from qnnrt.runtime.residency import ContextPool
from tests.helpers.program_fixtures import make_chain
from tests.helpers.qnn_fixtures import WIDTH

X = np.linspace(-2, 2, WIDTH, dtype=np.float32)[None]


def belady_misses(n: int, k: int, iterations: int = 12) -> int:
    """Misses per iteration (steady state) of the optimal policy on the cyclic order 0..n-1."""
    order = list(range(n)) * iterations
    cache, misses = set(), [0] * iterations
    for t, key in enumerate(order):
        if key in cache:
            continue
        misses[t // n] += 1
        if len(cache) >= k:
            def next_use(c, t=t):
                return next((u for u in range(t + 1, len(order)) if order[u] == c), 1 << 30)
            cache.remove(max(cache, key=next_use))
        cache.add(key)
    return misses[-2]


@pytest.mark.parametrize("k", [3, 4, 6])
def test_bounded_evicts_about_as_few_as_belady(chain12, k):
    with qnnrt.load(chain12.model, residency=f"bounded:{k}") as prog:
        counts = []
        for _ in range(8):
            prog.run(None, {"x": X})
            counts.append(prog.pool.stats.evictions)
        s = prog.pool.summary()
    per_iteration = counts[-1] - counts[-2]
    # prefetching while a graph runs may cost one creation more than the optimum per iteration
    assert belady_misses(12, k) <= per_iteration <= belady_misses(12, k) + 1
    assert s["peak_live"] == k
    # the next context is created in the background and used: (almost) every prefetch is a hit
    assert s["prefetches"] > 0 and s["prefetch_hits"] >= s["prefetches"] - 1


def test_exception_during_prefetch_does_not_pin_a_context(chain12, monkeypatch):
    calls = {"n": 0}
    orig = ContextPool._prefetch

    def flaky(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected")
        return orig(self, *a, **kw)
    monkeypatch.setattr(ContextPool, "_prefetch", flaky)
    with qnnrt.load(chain12.model, residency="bounded:2") as prog:
        with pytest.raises(RuntimeError, match="injected"):
            prog.run(None, {"x": X})
        assert prog.pool._in_use == {}
        prog.run(None, {"x": X})
        prog.run(None, {"x": X})
        assert prog.pool._in_use == {} and prog.pool.summary()["peak_live"] <= 2


def test_every_created_context_is_freed(chain12):
    for policy in ("auto", "bounded:2", "bounded:5", "lazy", "sequential"):
        prog = qnnrt.load(chain12.model, residency=policy)
        prog.run(None, {"x": X})
        pool = prog.pool
        prog.close()
        s = pool.summary()
        assert s["creates"] == s["frees"], (policy, s)
        assert prog.backend.live_contexts() == []


def test_one_file_descriptor_per_binary(chain12):
    def fds():
        return len(os.listdir("/proc/self/fd"))
    before = fds()
    with qnnrt.load(chain12.model, residency="lazy") as prog:
        during = fds()
        assert during - before <= 12 + 2  # one per mapped binary (+ slack for ORT / QNN)
        prog.run(None, {"x": X})
    assert fds() <= before + 2


@pytest.mark.slow
def test_close_while_another_thread_runs_does_not_crash(chain12, tmp_path):
    """close() waits for the run in progress; run in a subprocess so a crash shows as a signal."""
    script = tmp_path / "race.py"
    script.write_text(textwrap.dedent(f"""
        import sys, threading, time
        sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))!r})
        import numpy as np, qnnrt
        from qnnrt.errors import QnnrtError
        x = np.linspace(-2, 2, {WIDTH}, dtype=np.float32)[None]
        for trial in range(8):
            prog = qnnrt.load({str(chain12.model)!r}, residency="bounded:2" if trial % 2 else "lazy")
            def loop():
                try:
                    while True:
                        prog.run(None, {{"x": x}})
                except QnnrtError:
                    pass  # "program is closed"
            t = threading.Thread(target=loop)
            t.start()
            time.sleep(0.01 + 0.005 * trial)
            prog.close()
            t.join(30)
            assert not t.is_alive()
        print("ok")
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.strip().endswith("ok")


@pytest.mark.slow
def test_more_binaries_than_the_soft_fd_limit(tmp_path, distinct_binaries):
    """A program with more context binaries than `ulimit -n` (soft) allows still opens: qnnrt
    raises the soft limit to the hard one when it runs out of descriptors."""
    import resource
    chain = make_chain(tmp_path, distinct_binaries, 120)

    def low_soft_limit():
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", "run", str(chain.model)],
                       capture_output=True, text=True, timeout=300, preexec_fn=low_soft_limit,
                       env=dict(os.environ, PYTHONPATH=root))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "120 context(s)" in r.stdout
