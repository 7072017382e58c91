"""The one binder (core.graph.GraphBinding) on its own, against the real simulator: slots in, slots
out, planned buffers bound once, conversions only where asked, and wrong planned buffers refused."""
import numpy as np
import pytest

from qnnrt.core import Backend, Context, ContextBinary
from qnnrt.core.binding import GraphBinding
from qnnrt.core.call import BoundCall
from qnnrt.errors import QnnrtError
from tests.helpers.qnn_fixtures import WIDTH


@pytest.fixture(scope="module")
def live(small_binary):
    with Backend(soc="SM8550") as be, Context(be, ContextBinary(small_binary.path)) as ctx:
        yield be, ctx.graph(small_binary.graphs[0])


def _binding(live, in_slots: list[int], out_slots: list[int]) -> GraphBinding:
    """A binder over the live graph (dequantizing outputs), its call pointed at the graph."""
    backend, graph = live
    b = GraphBinding(BoundCall(backend, graph.spec), graph.spec, in_slots, out_slots, True, "test")
    b.call.handle = graph.handle
    return b


def test_binding_over_slots_equals_graph_execute(live):
    graph = live[1]
    x = np.random.default_rng(3).standard_normal((1, WIDTH)).astype(np.float32)
    want = graph.execute([x])["y"]
    b = _binding(live, [2], [0])
    values: list = [None, None, x]
    assert b.run(values) > 0
    assert np.array_equal(values[0], want) and values[2] is x
    first = values[0]
    b.run(values)
    assert values[0] is not first            # a fresh output array per call by default


def test_planned_buffers_are_bound_once(live):
    graph = live[1]
    x = np.random.default_rng(4).standard_normal((1, WIDTH)).astype(np.float32)
    want = graph.execute([x])["y"]
    b = _binding(live, [0], [1])
    xin, yout = np.empty((1, WIDTH), np.float32), np.empty((1, WIDTH), np.float32)
    b.bind_input(0, xin)
    b.bind_output(0, yout)
    xin[...] = x
    values: list = [None, yout]               # the planner puts the output buffer in its slot
    b.run(values)
    assert values[1] is yout and np.array_equal(yout, want)


def test_checked_input_is_converted_by_its_adapter(live):
    graph = live[1]
    x64 = np.random.default_rng(5).standard_normal((1, WIDTH))      # float64: converted
    b = _binding(live, [0], [1])
    values: list = [x64, None]
    b.run(values)
    assert np.array_equal(values[1], graph.execute([x64.astype(np.float32)])["y"])
    with pytest.raises(QnnrtError, match="shape"):
        b.run([np.zeros((1, WIDTH + 1), np.float32), None])


def test_a_planned_buffer_of_another_kind_is_refused(live):
    backend, graph = live
    b = _binding(live, [0], [1])
    with pytest.raises(QnnrtError, match="planned buffer"):
        b.bind_input(0, np.zeros((1, WIDTH + 1), np.float32))
    with pytest.raises(QnnrtError, match="planned buffer"):
        b.bind_output(0, np.zeros((1, WIDTH), np.float16))
    with pytest.raises(QnnrtError, match="slots"):
        GraphBinding(BoundCall(backend, graph.spec), graph.spec, [0, 1], [2], True, "test")


def test_a_binding_bound_once_calls_the_graph_alone_until_observed(live):
    """With every tensor bound once a call is the C call alone (slots untouched); attaching a
    profile makes it more again: the sink gets each call's events."""
    backend, graph = live
    from qnnrt.core import Profile
    x = np.random.default_rng(6).standard_normal((1, WIDTH)).astype(np.float32)
    want = graph.execute([x])["y"]
    b = _binding(live, [0], [1])
    xin, yout = x.copy(), np.empty((1, WIDTH), np.float32)
    b.bind_input(0, xin)
    b.bind_output(0, yout)
    values: list = ["untouched", yout]
    b.run(values)
    assert values == ["untouched", yout] and np.array_equal(yout, want)
    assert b.entry == b.call        # a call site calls the C call itself
    yout[...] = 0
    b.entry(values)
    assert np.array_equal(yout, want)
    got: list = []
    with Profile(backend, "basic") as profile:
        b.attach_profile(profile, got.append)
        assert b.entry == b.run
        b.entry(values)
    assert len(got) == 1 and got[0]


def test_the_graph_handle_is_passed_as_its_address(live):
    """BoundCall passes the handle as a ready pointer argument: its address, NULL as None."""
    import ctypes as C

    from qnnrt.core.call import pointer_arg
    backend, graph = live
    assert pointer_arg(None) is None and pointer_arg(C.c_void_p()) is None
    arg = pointer_arg(C.c_void_p(0x1234560))
    assert C.cast(arg, C.c_void_p).value == 0x1234560   # what the C function receives
    call = BoundCall(backend, graph.spec)
    call.handle = graph.handle
    assert call.handle is graph.handle
