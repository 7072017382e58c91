"""The qnn_compile_spec decoder: the ExecuTorch fixtures (all written by 1.5.1: layout 1.1+, burst) and
one synthetic spec of each field layout ExecuTorch has used (0.5-1.0 and 1.1+), built with the
flatbuffers builder from the public schema's field order."""

import flatbuffers
import pytest

from qnnrt.executorch.compile_spec import parse_qnn_compile_spec, runtime_options
from qnnrt.executorch.program import pte_runtime_options
from qnnrt.executorch.reader import read_pte
from tests.helpers.data import EXECUTORCH, executorch_pte

FIXTURES = sorted(p.parent.name for p in EXECUTORCH.glob("*/model.pte"))


@pytest.mark.parametrize("name", FIXTURES)
def test_every_fixture_asks_for_burst(name):
    with read_pte(executorch_pte(name)) as prog:
        opts = pte_runtime_options(prog)
        specs = [parse_qnn_compile_spec(bytes(d.compile_specs["qnn_compile_spec"]))
                 for m in prog.methods.values() for d in m.delegates]
    assert opts["performance_mode"] == "burst"
    assert (opts["shared_buffer"], opts["use_multi_contexts"], opts["pd_session"]) == (False, False, "unsigned")
    assert all(s["layout"] == "1.1+" and s["soc_model"] == "SM8650" for s in specs)
    assert specs[0]["precision"] == ("quantized" if name.endswith("q8") else "fp16")


def _string(b, s):
    return b.CreateString(s)


def _spec(layout: str, perf: int, shared: bool, multi: bool, sf: int, signed: bool) -> bytes:
    """A QnnExecuTorchOptions buffer laid out as ExecuTorch `layout` writes it (what flatc writes for
    its JSON: every string field present, scalars only when not the default)."""
    b = flatbuffers.Builder(256)
    old = layout == "0.5-1.0"
    skel = _string(b, "") if old else None
    b.StartObject(10)
    b.PrependInt32Slot(0, sf, 0)
    b.PrependInt32Slot(1, perf, 0)
    b.PrependInt32Slot(2, 1, 0)                              # fp16
    b.PrependInt32Slot(3, 1 if signed else 0, 0)
    if old:
        b.PrependUOffsetTRelativeSlot(4, skel, 0)
    b.PrependBoolSlot(5 if old else 4, True, False)          # use_conv_hmx
    b.PrependBoolSlot(8 if old else 7, multi, False)         # use_multi_contexts
    htp = b.EndObject()
    b.StartObject(2)
    b.PrependInt32Slot(0, 2, 0)                              # htp backend
    b.PrependUOffsetTRelativeSlot(1, htp, 0)
    backend = b.EndObject()
    b.StartObject(2); b.PrependInt32Slot(0, 75, 0); hinfo = b.EndObject()
    b.StartObject(2); b.PrependInt32Slot(0, 57, 0); b.PrependUOffsetTRelativeSlot(1, hinfo, 0)
    soc = b.EndObject()
    graph = _string(b, "forward") if old else None
    lib = _string(b, "")
    out_dir = _string(b, "saver_output")
    b.StartObject(13)
    b.PrependUOffsetTRelativeSlot(0, soc, 0)
    b.PrependUOffsetTRelativeSlot(1, backend, 0)
    if old:
        b.PrependUOffsetTRelativeSlot(2, graph, 0)
    b.PrependUOffsetTRelativeSlot(3 if old else 2, lib, 0)
    b.PrependInt32Slot(4 if old else 3, 1, 0)                # log level error
    b.PrependBoolSlot(8 if old else 7, shared, False)        # shared_buffer
    b.PrependUOffsetTRelativeSlot(11 if old else 10, out_dir, 0)
    root = b.EndObject()
    b.Finish(root)
    return bytes(b.Output())


@pytest.mark.parametrize("layout", ["1.1+", "0.5-1.0"])
def test_each_layout_decodes_to_the_same_options(layout):
    s = parse_qnn_compile_spec(_spec(layout, perf=8, shared=True, multi=True, sf=123456, signed=True))
    assert s["layout"] == layout
    assert (s["soc_model"], s["htp_arch"], s["precision"], s["log_level"]) == ("SM8650", 75, "fp16", "error")
    assert (s["performance_mode"], s["shared_buffer"], s["use_multi_contexts"], s["max_sf_buf_size"],
            s["pd_session"], s["use_conv_hmx"]) == ("balanced", True, True, 123456, "signed", True)
    plain = parse_qnn_compile_spec(_spec(layout, perf=0, shared=False, multi=False, sf=0, signed=False))
    assert (plain["performance_mode"], plain["shared_buffer"], plain["use_multi_contexts"]) == \
        ("default", False, False)


def test_garbage_never_raises():
    assert parse_qnn_compile_spec(b"") == {}
    assert parse_qnn_compile_spec(b"\xff" * 64) == {}
    assert "performance_mode" not in parse_qnn_compile_spec(b"\0" * 8)


def test_runtime_options_merge_and_keep_disagreements():
    a = {"performance_mode": "burst", "shared_buffer": False}
    b = {"performance_mode": "balanced", "shared_buffer": False}
    assert runtime_options([a, b]) == {"performance_mode": ["burst", "balanced"], "shared_buffer": False}
