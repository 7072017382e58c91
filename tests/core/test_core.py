"""The owned handles against the real x86 HTP simulator."""
import gc

import numpy as np
import pytest

from qnnrt.core import Backend, Context, ContextBinary, Profile
from qnnrt.errors import FormatError, InputError, QnnError, QnnrtError
from tests.helpers.qnn_fixtures import WIDTH, add_relu_mul_ref, two_partitions_refs

FP16_TOL = dict(rtol=2e-2, atol=2e-2)


@pytest.fixture(scope="module")
def backend():
    with Backend(soc="SM8550") as be:
        yield be


def test_binary_info(small_binary):
    with ContextBinary(small_binary.path) as b:
        info = b.info
        assert info.soc_model == 43 and info.core_api.startswith("2.")
        assert [g.name for g in b.graphs] == small_binary.graphs
        g = b.graphs[0]
        assert [t.name for t in g.inputs] == ["x"] and [t.name for t in g.outputs] == ["y"]
        assert g.inputs[0].shape == (1, WIDTH) and g.inputs[0].dtype == np.float32
        assert b.size == small_binary.path.stat().st_size


def test_binary_is_memory_mapped_not_copied(small_binary):
    with ContextBinary(small_binary.path) as b:
        assert not b.buffer.flags.owndata and not b.buffer.flags.writeable


def test_execute_matches_numpy(backend, small_binary):
    b = ContextBinary(small_binary.path)
    with Context(backend, b) as ctx:
        g = ctx.graph(small_binary.graphs[0])
        rng = np.random.default_rng(1)
        for _ in range(3):
            x = rng.standard_normal((1, WIDTH)).astype(np.float32)
            y = g.execute({"x": x})["y"]
            np.testing.assert_allclose(y, add_relu_mul_ref(x), **FP16_TOL)


def test_outputs_do_not_alias_reused_buffers(backend, small_binary):
    with Context(backend, ContextBinary(small_binary.path)) as ctx:
        g = ctx.graph(small_binary.graphs[0])
        a = g.execute([np.ones((1, WIDTH), np.float32)])["y"]
        keep = a.copy()
        g.execute([np.full((1, WIDTH), 5, np.float32)])
        np.testing.assert_array_equal(a, keep)


def test_two_graph_context(backend, two_graph_binary):
    b = ContextBinary(two_graph_binary.path)
    assert len(b.graphs) == 2
    with Context(backend, b) as ctx:
        x = np.linspace(-2, 2, WIDTH, dtype=np.float32)[None]
        for name, ref in zip(two_graph_binary.graphs, two_partitions_refs(x)):
            y = ctx.graph(name).execute([x])
            np.testing.assert_allclose(list(y.values())[0], ref, **FP16_TOL)


def test_profile_events(backend, small_binary):
    b = ContextBinary(small_binary.path)
    with Profile(backend, "detailed") as p, Context(backend, b, profile=p) as ctx:
        names = [e["name"] for e in p.events()]
        assert any("load binary" in n for n in names)
        ctx.graph(b.graphs[0].name).execute([np.zeros((1, WIDTH), np.float32)], profile=p)
        events = p.events()
        cyc = [e for e in events if e["unit"] == "cycles"]
        assert cyc and cyc[0]["sub"], "detailed profile has per-op cycle sub-events"
        assert any(e["name"] == "QNN (execute) time" and e["unit"] == "us" for e in events)


def test_300_contexts_created_executed_freed(backend, small_binary):
    b = ContextBinary(small_binary.path)
    x = np.ones((1, WIDTH), np.float32)
    ref = add_relu_mul_ref(x)
    for _ in range(300):
        with Context(backend, b) as ctx:
            y = ctx.graph(small_binary.graphs[0]).execute([x])["y"]
        np.testing.assert_allclose(y, ref, **FP16_TOL)
    assert backend.live_contexts() == []


def test_pd_exhaustion_is_a_clear_error_and_recoverable(small_binary):
    b = ContextBinary(small_binary.path)
    with Backend(soc="SM8550") as be:
        live = []
        with pytest.raises(QnnError) as ei:
            for _ in range(1000):  # ~350 of these fill the simulator's ~3.64 GB PD
                live.append(Context(be, b))
        err = ei.value
        assert err.code == 1002 and err.is_pd_exhaustion
        assert "protection-domain" in str(err) and "Failed to find available PD" in str(err)
        assert 100 < len(live) < 1000
        n = len(live)
        for c in live:
            c.close()
        live.clear()
        # everything freed: the same number fits again
        again = [Context(be, b) for _ in range(n)]
        y = again[-1].graph(small_binary.graphs[0]).execute([np.ones((1, WIDTH), np.float32)])
        assert np.isfinite(y["y"]).all()
        for c in again:
            c.close()
    gc.collect()


def test_wrong_inputs_are_clear_errors(backend, small_binary):
    with Context(backend, ContextBinary(small_binary.path)) as ctx:
        g = ctx.graph(small_binary.graphs[0])
        ok = np.zeros((1, WIDTH), np.float32)
        with pytest.raises(InputError, match="shape"):
            g.execute([np.zeros((1, WIDTH + 1), np.float32)])
        with pytest.raises(InputError, match="dtype"):
            g.execute([np.zeros((1, WIDTH), np.int32)])
        with pytest.raises(InputError, match="got 2 input"):
            g.execute([ok, ok])
        with pytest.raises(InputError, match="unknown input"):
            g.execute({"nope": ok})
        with pytest.raises(InputError, match="missing input"):
            g.execute({})
        # still usable after the errors
        assert g.execute([ok])["y"].shape == (1, WIDTH)


def test_unknown_graph_name(backend, small_binary):
    with Context(backend, ContextBinary(small_binary.path)) as ctx:
        with pytest.raises(FormatError, match="no graph named 'nope'"):
            ctx.graph("nope")


def test_graph_of_freed_context_refuses_to_run(backend, small_binary):
    ctx = Context(backend, ContextBinary(small_binary.path))
    g = ctx.graph(small_binary.graphs[0])
    ctx.close()
    ctx.close()  # idempotent
    with pytest.raises(QnnrtError, match="freed"):
        g.execute([np.zeros((1, WIDTH), np.float32)])


def test_backend_close_frees_children_in_reverse_order(small_binary):
    be = Backend()
    b = ContextBinary(small_binary.path)
    c1, c2 = Context(be, b), Context(be, b)
    p = Profile(be)
    be.close()
    assert c1.closed and c2.closed and p.closed
    be.close()  # idempotent
    assert not any("SSR" in line for line in be.log.tail(50, max_level=5))


@pytest.mark.parametrize("content", [b"", b"\x00" * 10, b"hello, I am a text file\n" * 20])
def test_bad_binary_files(tmp_path, content):
    p = tmp_path / "bad.bin"
    p.write_bytes(content)
    with pytest.raises(FormatError):
        _ = ContextBinary(p).info


def test_missing_binary_file(tmp_path):
    with pytest.raises(FormatError, match="no such file"):
        ContextBinary(tmp_path / "missing.bin")
