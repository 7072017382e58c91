"""The .pte reader: real ExecuTorch 1.5.1 fixtures, files from tests/pte_writer.py, and bad input."""
import struct

import numpy as np
import pytest

from tests.helpers.data import EXECUTORCH
from tests.helpers.pte_writer import PteBuilder, qnn_wrap
from qnnrt.errors import FormatError
from qnnrt.executorch.reader import (is_pte_file, parse_qnn_compile_spec, qnn_context_binary,
                               qnn_graph_io_order, read_pte, unwrap_qnn_delegate)
from qnnrt.executorch.describe import describe_pte

FIXTURES = EXECUTORCH
needs_fixtures = pytest.mark.skipif(not (FIXTURES / "many_4_fp16" / "model.pte").exists(),
                                    reason="ExecuTorch fixtures not available")
FIXTURE_NAMES = ["add_relu_mul_fp16", "add_relu_mul_q8", "conv_linear_fp16", "conv_linear_q8",
                 "many_4_fp16", "two_methods_fp16"]


# --- real ExecuTorch files ----------------------------------------------------------------------

@needs_fixtures
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_structure(name):
    path = FIXTURES / name / "model.pte"
    size = path.stat().st_size
    assert is_pte_file(str(path))
    with read_pte(path, require_qnn=True) as prog:
        h = prog.header
        assert h is not None and h.length == 32
        assert h.program_size < h.segment_base_offset
        assert h.segment_base_offset + h.segment_data_size == size
        for meth in prog.methods.values():
            for i, spec in enumerate(meth.inputs):
                x = np.load(FIXTURES / name / f"{meth.name}_input_{i}.npy")
                assert spec.name == f"input_{i}"
                assert spec.shape == x.shape and spec.dtype == x.dtype
            for i, spec in enumerate(meth.outputs):
                ref = np.load(FIXTURES / name / f"{meth.name}_ref_{i}.npy")
                assert spec.shape == ref.shape and spec.dtype == ref.dtype
            assert meth.delegates and all(d.is_qnn and d.location == "SEGMENT"
                                          for d in meth.delegates)
            for d in meth.delegates:
                q = unwrap_qnn_delegate(d)
                assert q.wrapper == "QnnContextCustomProtocol" and q.header_size == 256
                assert q.declared_size == d.size - 256 == len(q.binary)
                assert bytes(d.blob[:4]) == struct.pack("<I", 0x5678ABCD)
                # a view of the file's memory map, not a copy
                assert isinstance(q.binary, memoryview) and q.binary.readonly
                with open(path, "rb") as f:
                    f.seek(d.file_offset + 256)
                    assert f.read(64) == bytes(q.binary[:64])
                spec = parse_qnn_compile_spec(d)
                assert spec["soc_model"] == "SM8650" and spec["htp_arch"] == 75
                assert spec["precision"] == ("quantized" if name.endswith("q8") else "fp16")
                assert meth.graph_name(d.index) == meth.name


@needs_fixtures
def test_fixture_many_delegates_with_cpu_mm():
    with read_pte(FIXTURES / "many_4_fp16" / "model.pte") as prog:
        m = prog.methods["forward"]
        assert m.used_operator_names() == ["aten::mm.out"]
        assert m.delegate_call_order() == [0, 1, 2, 3]
        assert len({d.key for d in m.delegates}) == 4
        weights = [i for i, v in enumerate(m.values) if v.kind == "tensor" and v.value.is_constant]
        assert len(weights) == 4
        for i in weights:
            w = m.constant(i)
            assert w.shape == (64, 64) and w.dtype == np.float32 and not w.flags.writeable
            assert np.isfinite(w).all() and np.abs(w).max() > 0
        # constants live in segment 0, delegates in segments 1..4
        assert prog.constant_segment[0] == 0
        assert sorted(d.data_index for d in m.delegates) == [1, 2, 3, 4]


@needs_fixtures
def test_fixture_two_methods_share_one_delegate():
    with read_pte(FIXTURES / "two_methods_fp16" / "model.pte") as prog:
        assert sorted(prog.methods) == ["decode", "prefill"]
        blobs = prog.unique_delegate_blobs()
        assert len(blobs) == 1
        (key, users), = blobs.items()
        assert sorted(d.method for d in users) == ["decode", "prefill"]
        sigs = {unwrap_qnn_delegate(d).signature for d in users}
        assert len(sigs) == 1
        info = describe_pte(prog)
        assert len(info["contexts"]) == 1
        assert sorted(info["contexts"][0]["graphs_used"]) == ["decode", "prefill"]


@needs_fixtures
def test_describe_fixture():
    with read_pte(FIXTURES / "many_4_fp16" / "model.pte") as prog:
        info = describe_pte(prog, graph_lister=lambda b: ["forward"])
    m = info["methods"][0]
    assert m["cpu_operators"] == [{"name": "aten::mm.out", "calls": 4, "implemented": True}]
    assert [d["context_binary_size"] for d in m["delegates"]] == [61440] * 4
    assert info["contexts"][0]["graphs"] == ["forward"]
    assert info["missing_operators"] == [] and info["non_qnn_delegates"] == []


# --- files made by the test writer --------------------------------------------------------------

def _program(tmp_path, constants="segment", name="model.pte"):
    b = PteBuilder(constants=constants)
    seg = b.add_segment(qnn_wrap(b"SEGCTX" * 50, signature=7))
    inl = b.add_inline_delegate_data(qnn_wrap(b"INLCTX" * 5, signature=8))
    f = b.method("forward")
    x = f.tensor(np.float32, (2, 3))
    w = f.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
    y = f.tensor(np.float32, (2, 2))
    z = f.tensor(np.float32, (2, 2))
    f.kernel("aten::mm.out", [x, w, y, y])
    d0 = f.delegate("QnnBackend", segment=seg, compile_specs={"qnn_compile_spec": b"\0" * 8})
    d1 = f.delegate("QnnBackend", inline=inl)
    f.delegate_call(d0, [y, z])
    u = f.tensor(np.float32, (2, 2))
    f.delegate_call(d1, [z, u])
    f.inputs, f.outputs = [x], [u]
    g = b.method("decode")
    a = g.tensor(np.float32, (4,))
    c = g.tensor(np.float32, (4,))
    g.delegate_call(g.delegate("QnnBackend", segment=seg), [a, c])
    g.inputs, g.outputs = [a], [c]
    p = tmp_path / name
    b.save(p)
    return p


@pytest.mark.parametrize("constants", ["segment", "inline"])
def test_writer_roundtrip(tmp_path, constants):
    p = _program(tmp_path, constants)
    with read_pte(p, require_qnn=True) as prog:
        f = prog.methods["forward"]
        assert [d.location for d in f.delegates] == ["SEGMENT", "INLINE"]
        assert bytes(qnn_context_binary(f.delegates[0])) == b"SEGCTX" * 50
        assert bytes(qnn_context_binary(f.delegates[1])) == b"INLCTX" * 5
        assert unwrap_qnn_delegate(f.delegates[1]).signature == 8
        # the shared blob has one key in both methods
        assert prog.methods["decode"].delegates[0].key == f.delegates[0].key == ("segment", 0)
        assert len(prog.unique_delegate_blobs()) == 2
        w = [i for i, v in enumerate(f.values) if v.kind == "tensor" and v.value.is_constant][0]
        np.testing.assert_array_equal(f.constant(w), np.arange(6, dtype=np.float32).reshape(3, 2))
        assert f.operator_names == ["aten::mm.out"]
        assert f.inputs[0].shape == (2, 3) and f.outputs[0].name == "output_0"


def test_writer_value_kinds(tmp_path):
    b = PteBuilder()
    m = b.method("forward")
    t = m.tensor(np.int64, (2,), allocation=(1, 2**33 + 16), dynamism=1, fqn="buf")
    i = m.int(-5)
    bo = m.bool(True)
    d = m.double(2.5)
    s = m.string("hi")
    n = m.null()
    il = m.int_list([3, 4])
    dl = m.double_list([1.5])
    bl = m.bool_list([True, False])
    tl = m.tensor_list([t, t])
    ol = m.optional_tensor_list([t, -1])
    m.inputs, m.outputs = [t], [t]
    b.save(tmp_path / "v.pte")
    with read_pte(tmp_path / "v.pte") as prog:
        v = prog.methods["forward"].values
        assert v[t].kind == "tensor" and v[t].value.allocation == (1, 2**33 + 16)
        assert v[t].value.shape_dynamism == 1 and v[t].value.fully_qualified_name == "buf"
        assert (v[i].value, v[bo].value, v[d].value, v[s].value) == (-5, True, 2.5, "hi")
        assert v[n].kind == "null"
        assert v[il].kind == "int_list" and [v[j].value for j in v[il].value] == [3, 4]
        assert v[dl].value == (1.5,) and v[bl].value == (True, False)
        assert v[tl].value == (t, t) and v[ol].value == (t, -1)


def test_bare_context_binary_is_accepted():
    q = unwrap_qnn_delegate(b"\x00\x00\x00\x02rest-of-a-context-binary")
    assert q.wrapper == "none" and q.header_size == 0 and "bare" in q.description
    assert bytes(qnn_context_binary(bytearray(b"abcd"))) == b"abcd"


def test_legacy_20_byte_wrapper():
    q = unwrap_qnn_delegate(qnn_wrap(b"X" * 40, legacy=True))
    assert q.header_size == 20 and bytes(q.binary) == b"X" * 40


def test_qnn_graph_io_order():
    ins, outs = qnn_graph_io_order(
        ["input_1_aten_add_tensor_8@0", "input_0_aten_mm_default_3@0", "input_10_y", "input_2_z"],
        ["output_aten_sum@0", "output_aten_add@0"])
    assert ins == [1, 0, 3, 2] and outs == [0, 1]
    ins, outs = qnn_graph_io_order(["input_0_x", "mutbuf_0_k", "input_1_y"],
                                   ["output_a", "mutbuf_0_k_out", "output_b"])
    assert ins == [0, 2] and outs == [0, 2]


# --- bad input ----------------------------------------------------------------------------------

def _no_crash(path, **kw):
    """read_pte must either succeed or raise FormatError; nothing else."""
    try:
        prog = read_pte(path, **kw)
    except FormatError as e:
        return str(e)
    prog.close()
    return None


def test_empty_and_tiny_files(tmp_path):
    for data in (b"", b"ET12", b"\x0c\x00\x00\x00ET"):
        p = tmp_path / "tiny.pte"
        p.write_bytes(data)
        with pytest.raises(FormatError, match="truncated|too short"):
            read_pte(p)
    with pytest.raises(FormatError, match="cannot open"):
        read_pte(tmp_path / "missing.pte")


def test_wrong_file_identifier(tmp_path):
    data = bytearray(_program(tmp_path).read_bytes())
    data[4:8] = b"ET11"
    p = tmp_path / "bad.pte"
    p.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="ET11.*another schema version"):
        read_pte(p)
    p.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(FormatError, match="file identifier"):
        read_pte(p)
    assert not is_pte_file(str(p))


def test_truncated_files(tmp_path):
    good = _program(tmp_path).read_bytes()
    size = len(good)
    with read_pte(tmp_path / "model.pte") as prog:
        seg_start = prog.header.segment_base_offset
    p = tmp_path / "cut.pte"
    # cut inside the segments: the header's sizes no longer fit the file
    for cut in (size - 1, seg_start + 10, seg_start):
        p.write_bytes(good[:cut])
        with pytest.raises(FormatError, match="truncated"):
            read_pte(p)
    # cut anywhere else: always a FormatError, never a crash
    for cut in range(0, seg_start, 7):
        p.write_bytes(good[:cut])
        assert _no_crash(p) is not None


def test_corrupted_bytes_never_crash(tmp_path):
    good = _program(tmp_path).read_bytes()
    rng = np.random.default_rng(1)
    p = tmp_path / "fuzz.pte"
    with read_pte(tmp_path / "model.pte") as prog:
        limit = prog.header.program_size
    for _ in range(150):
        data = bytearray(good)
        for pos in rng.integers(8, limit, size=3):
            data[pos] = int(rng.integers(0, 256))
        p.write_bytes(bytes(data))
        _no_crash(p)


def test_delegate_index_out_of_range(tmp_path):
    b = PteBuilder()
    seg = b.add_segment(qnn_wrap(b"C" * 10))
    m = b.method("forward")
    x, y = m.tensor(np.float32, (1,)), m.tensor(np.float32, (1,))
    m.delegate("QnnBackend", segment=seg)
    m.delegate_call(3, [x, y])
    m.inputs, m.outputs = [x], [y]
    b.save(tmp_path / "d.pte")
    with pytest.raises(FormatError, match="calls delegate 3.*1 delegate"):
        read_pte(tmp_path / "d.pte")


def test_bad_references(tmp_path):
    # operator index, value index and delegate data index out of range
    cases = []
    b = PteBuilder()
    m = b.method("forward")
    x = m.tensor(np.float32, (1,))
    m.kernel_index(5, [x, x])
    m.inputs, m.outputs = [x], [x]
    cases.append((b, "operator 5"))
    b = PteBuilder()
    m = b.method("forward")
    x = m.tensor(np.float32, (1,))
    m.kernel("aten::clone.out", [x, 99, x, x])
    m.inputs, m.outputs = [x], [x]
    cases.append((b, "value 99"))
    b = PteBuilder()
    b.add_segment(b"x" * 8)
    m = b.method("forward")
    x = m.tensor(np.float32, (1,))
    m.delegate_call(m.delegate("QnnBackend", segment=4), [x, x])
    m.inputs, m.outputs = [x], [x]
    cases.append((b, "segment 4"))
    for k, (builder, msg) in enumerate(cases):
        p = tmp_path / f"r{k}.pte"
        builder.save(p)
        with pytest.raises(FormatError, match=msg):
            read_pte(p)


def test_non_qnn_delegate(tmp_path):
    b = PteBuilder()
    seg = b.add_segment(b"xnnpack-payload")
    m = b.method("forward")
    x, y = m.tensor(np.float32, (1,)), m.tensor(np.float32, (1,))
    m.delegate_call(m.delegate("XnnpackBackend", segment=seg), [x, y])
    m.inputs, m.outputs = [x], [y]
    b.save(tmp_path / "x.pte")
    with read_pte(tmp_path / "x.pte") as prog:       # readable (for inspect) ...
        d = prog.methods["forward"].delegates[0]
        assert not d.is_qnn
        with pytest.raises(FormatError, match="XnnpackBackend.*QNN"):
            qnn_context_binary(d)
        assert describe_pte(prog)["non_qnn_delegates"] == ["forward.delegates[0] (XnnpackBackend)"]
    with pytest.raises(FormatError, match="other backends.*XnnpackBackend"):   # ... not runnable
        read_pte(tmp_path / "x.pte", require_qnn=True)


def test_bad_qnn_payloads():
    with pytest.raises(FormatError, match="DLC"):
        unwrap_qnn_delegate(b"PK\x03\x04" + b"\0" * 60)
    with pytest.raises(FormatError, match="QCIR"):
        unwrap_qnn_delegate(struct.pack("<I", 0x1234ABCD) + b"\0" * 60)
    with pytest.raises(FormatError, match="declares a 1000-byte"):
        unwrap_qnn_delegate(struct.pack("<IqQ", 0x5678ABCD, 1, 1000) + b"\0" * 300)
    with pytest.raises(FormatError, match="empty"):
        unwrap_qnn_delegate(b"")
