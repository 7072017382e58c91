"""Spill-fill groups and shared buffers on the simulator, which offers neither: the group is refused
by QNN (5010) and the context is created without it; there is no libcdsprpc (shared buffers run
here through an emulation: tests/core/test_shared_buffers.py). The device path's own logic (the
group's head and its order, sizes, the fallback) is checked as far as that allows."""
import ctypes as C

import pytest

from qnnrt.core import Backend, ContextBinary
from qnnrt.core.context import Context
from qnnrt.core.shared_buffer import SharedMemory, bind_mem_handle
from qnnrt.core.spill_fill import CONFIG_NOT_SUPPORTED, SpillFillGroup
from qnnrt._capi import types as T
from qnnrt.errors import QnnrtError
from qnnrt.executorch.reader import qnn_context_binary, read_pte
from tests.helpers.data import executorch_pte

MANY = executorch_pte("many_4_fp16")


@pytest.fixture
def four_binaries():
    be = Backend(soc="SM8650")
    prog = read_pte(MANY)
    bins = [ContextBinary(buffer=qnn_context_binary(users[0]), name=f"d{i}", lib=be.lib)
            for i, users in enumerate(prog.unique_delegate_blobs().values())]
    yield be, bins
    be.close()
    for b in bins:
        b.close()
    prog.close()


def _registration(group: SpillFillGroup) -> T.HtpGroupRegistration:
    wrap, keep = group.config()
    htp = T.HtpContextCustomConfig.from_address(wrap.customConfig)
    assert (wrap.option, htp.option) == (T.CONTEXT_CONFIG_OPTION_CUSTOM,
                                         T.HTP_CONTEXT_OPTION_REGISTER_MULTI_CONTEXTS)
    return htp.groupRegistration


def test_the_simulator_refuses_the_group_and_the_context_is_made_without_it(four_binaries):
    be, bins = four_binaries
    group = SpillFillGroup(1 << 20)
    ctx = Context(be, bins[0], spill_fill_group=group)
    assert not ctx.closed and not group.usable
    assert str(CONFIG_NOT_SUPPORTED) in group.refused and "not supported" in group.refused
    assert group.head is None and group.members == []
    said, mark = group.refused, be.log.mark()
    Context(be, bins[1], spill_fill_group=group).close()   # refused once: not asked again
    assert group.refused == said
    assert not any("Config option: 2" in line for line in be.log.since(mark))


def test_group_order_first_context_heads_it_later_ones_name_it(four_binaries):
    """What a device sees: the first registration names no group, later ones the head's handle;
    the head leaving ends the group and the next context starts a new one."""
    be, bins = four_binaries
    group = SpillFillGroup(3 << 20)
    reg = _registration(group)
    assert reg.firstGroupHandle is None and reg.maxSpillFillBuffer == 3 << 20
    head, second = Context(be, bins[0]), Context(be, bins[1])
    group.joined(head)
    group.joined(second)
    assert _registration(group).firstGroupHandle == head.handle.value
    assert group.members == ["d0", "d1"] and group.groups_formed == 1
    group.left(second)
    assert group.head is head
    group.left(head)
    assert _registration(group).firstGroupHandle is None
    group.joined(second)
    assert group.head is second and group.groups_formed == 2


def test_a_group_needs_a_size():
    with pytest.raises(ValueError):
        SpillFillGroup(0)


def test_no_shared_buffers_without_libcdsprpc(four_binaries, monkeypatch):
    monkeypatch.delenv("QNNRT_CDSPRPC_LIB", raising=False)
    be, _ = four_binaries
    ok, why = SharedMemory.available()
    assert not ok and "libcdsprpc" in why
    with pytest.raises(QnnrtError, match="cannot make shared buffers: no libcdsprpc"):
        SharedMemory(be)


def test_mem_descriptor_carries_shape_type_and_fd():
    dims = (C.c_uint32 * 2)(4, 8)
    d = T.MemDescriptor(memType=T.MEM_TYPE_ION, dataType=0x0232)
    d.memShape.numDim, d.memShape.dimSize, d.ionFd = 2, dims, 7
    raw = C.string_at(C.addressof(d), C.sizeof(d))
    assert raw[0:4] == (2).to_bytes(4, "little") and raw[24:28] == (0x0232).to_bytes(4, "little")
    assert raw[28:32] == (1).to_bytes(4, "little") and raw[32:36] == (7).to_bytes(4, "little")


def test_binding_a_mem_handle_replaces_the_client_buffer():
    for version in (1, 2):
        t = T.Tensor(version=version)
        t.body.memType = T.TENSORMEMTYPE_RAW
        t.body.clientBuf.data, t.body.clientBuf.dataSize = 0x1000, 64
        bind_mem_handle(t, 0xABC0)
        assert t.body.memType == T.TENSORMEMTYPE_MEMHANDLE and t.body.memHandle == 0xABC0
