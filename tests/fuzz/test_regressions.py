"""One regression test per crash cause the fuzzer found: each is a clean QnnrtError
naming the file, before native code or ONNX Runtime sees the input."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import qnnrt
from qnnrt.errors import FormatError, QnnrtError
from qnnrt.fileio import loads_json
from qnnrt.loader import LoadOptions
from tests.helpers.data import CORRUPT_PTE, FUZZ_CASES
from tests.fuzz.corpus import make_seeds

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return make_seeds(tmp_path_factory.mktemp("regress"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QNNRT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def prog(seeds, tmp_path) -> Path:
    return Path(shutil.copytree(seeds["program"], tmp_path / "prog", symlinks=True))


def _manifest(prog: Path) -> dict:
    return json.loads((prog / "program.json").read_text())


def _write_manifest(prog: Path, data) -> None:
    text = data if isinstance(data, (str, bytes)) else json.dumps(data)
    (prog / "program.json").write_bytes(text if isinstance(text, bytes) else text.encode())


def _refused(path, *words: str, **kw) -> str:
    with pytest.raises(FormatError) as e:
        qnnrt.load(path, **kw).close()
    msg = str(e.value)
    for w in words:
        assert w in msg, msg
    return msg


# -- native crashes: vetting and sha256 ---------------------------------------------------------

@pytest.mark.slow
def test_corrupt_delegate_is_a_format_error_not_a_crash(tmp_path):
    """QNN segfaults on this .pte's delegate; through the API the process survives."""
    code = ("import qnnrt, sys\ntry:\n    qnnrt.load(sys.argv[1]).close()\nexcept qnnrt.QnnrtError as e:\n"
            "    print(type(e).__name__, e)\n")
    env = dict(os.environ, QNNRT_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code, str(CORRUPT_PTE)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, f"the API process died ({r.returncode}): {r.stderr[-800:]}"
    assert r.stdout.startswith("FormatError") and "crashed (SIGSEGV)" in r.stdout, r.stdout
    assert "corrupt_delegate.pte" in r.stdout
    # the verdict is cached: a second load refuses it without a child
    r2 = subprocess.run([sys.executable, "-c", code, str(CORRUPT_PTE)], capture_output=True,
                        text=True, env=env, timeout=300)
    assert r2.returncode == 0 and "crashed (SIGSEGV)" in r2.stdout


def test_vetting_once_per_content_and_opt_out(seeds, cache):
    with qnnrt.load(seeds["bin"]) as p:
        (rep,) = p.vet_reports
        assert rep.children == 1 and [r.verdict for r in rep.results] == ["ok"]
    with qnnrt.load(seeds["bin"]) as p:
        (rep,) = p.vet_reports
        assert rep.children == 0 and rep.results[0].cached
    with qnnrt.load(seeds["bin"], options=LoadOptions(vet=False)) as p:
        assert p.vet_reports == []


def test_program_binaries_are_hash_checked_not_vetted(prog, cache):
    with qnnrt.load(prog) as p:  # every binary has a sha256 in program.json: no vetting child
        assert all(not r.results for r in p.vet_reports)
    assert all(c.get("sha256") for c in _manifest(prog)["contexts"])
    ctx = prog / _manifest(prog)["contexts"][0]["path"]
    data = bytearray(ctx.read_bytes())
    data[len(data) // 2] ^= 0x40
    ctx.write_bytes(data)
    _refused(prog, "sha256", ctx.name, "not handed to QNN")


# -- JSON limits ------------------------------------------------------------------------------

def test_deep_json_is_refused(prog):
    _write_manifest(prog, "[" * 20000 + "]" * 20000)
    _refused(prog, "nested deeper")


def test_5000_digit_numbers_are_refused(prog):
    m = (prog / "program.json").read_text().replace('"version": 1', '"version": ' + "9" * 5000)
    _write_manifest(prog, m)
    _refused(prog, "5000 characters")


def test_one_json_reader_with_limits():
    for text, word in (("[" * 100 + "]" * 100, "nested"), ('{"a": 1e999999999999999999999999999999999999}', "number"),
                       ("NaN", "NaN"), (b"\xff", "UTF-8")):
        with pytest.raises(FormatError, match=word):
            loads_json(text, "x.json")


def test_non_utf8_and_nul_in_manifest(prog, seeds):
    raw = (prog / "program.json").read_bytes().replace(b'"name": "', b'"name": "\xff', 1)
    _write_manifest(prog, raw)
    _refused(prog, "UTF-8")
    m = _manifest(seeds["program"])
    m["contexts"][0]["path"] = "contexts/a\u0000.bin"
    _write_manifest(prog, m)
    _refused(prog, "NUL")
    m = _manifest(seeds["program"])
    m["methods"][0]["name"] = "\udcff"
    _write_manifest(prog, json.dumps(m))
    _refused(prog, "UTF-8")


# -- paths --------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/etc/hostname", "../x.bin", "contexts/../../x.bin", "C:\\x.bin"])
def test_manifest_paths_stay_inside(prog, path):
    m = _manifest(prog)
    m["contexts"][0]["path"] = path
    _write_manifest(prog, m)
    _refused(prog, "program.json")


def test_symlink_loop_in_contexts(prog):
    ctx = prog / _manifest(prog)["contexts"][0]["path"]
    ctx.unlink()
    os.symlink("loop_b", ctx.parent / "loop_a")
    os.symlink("loop_a", ctx.parent / "loop_b")
    os.symlink("loop_a", ctx)
    _refused(prog, "loop")


def test_symlink_out_of_the_folder(prog, tmp_path):
    ctx = prog / _manifest(prog)["contexts"][0]["path"]
    outside = tmp_path / "outside.bin"
    shutil.copyfile(ctx, outside)
    ctx.unlink()
    os.symlink(outside, ctx)
    _refused(prog, "outside the program folder")


def test_contexts_dir_symlink_loop(prog):
    shutil.rmtree(prog / "contexts")
    os.symlink("contexts", prog / "contexts")
    _refused(prog, "program.json")


def _epc(seeds, tmp_path, mode: int) -> Path:
    d = Path(shutil.copytree(seeds[f"epc{mode}"].parent, tmp_path / f"epc{mode}"))
    return d / seeds[f"epc{mode}"].name


def _edit_epcontext(model_path: Path, edit) -> None:
    m = onnx.load(str(model_path))
    node = next(n for n in m.graph.node if n.op_type == "EPContext")
    edit(node, {a.name: a for a in node.attribute})
    onnx.save(m, str(model_path))


@pytest.mark.parametrize("rel,word", [(b"../x.bin", "outside"), (b"/etc/hostname", "absolute"),
                                      (b"a\x00b.bin", "NUL"), (b"\xff.bin", "UTF-8"), (b"", "empty")])
def test_ep_cache_context_stays_inside(seeds, tmp_path, rel, word):
    p = _epc(seeds, tmp_path, 0)

    def edit(node, attrs):
        attrs["ep_cache_context"].s = rel
    _edit_epcontext(p, edit)
    _refused(p, word)


def test_ep_cache_context_symlink_loop(seeds, tmp_path):
    p = _epc(seeds, tmp_path, 0)
    b = next(p.parent.glob("*.bin"))
    b.unlink()
    os.symlink(b.name, b)
    _refused(p, "loop")


# -- EPContext models ---------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [0, 1])
def test_epcontext_node_without_outputs(seeds, tmp_path, mode):
    p = _epc(seeds, tmp_path, mode)
    _edit_epcontext(p, lambda node, attrs: node.ClearField("output"))
    _refused(p, "no outputs")


@pytest.mark.parametrize("mode", [0, 1])
def test_tensor_the_model_does_not_have(seeds, tmp_path, mode, cache):
    p = _epc(seeds, tmp_path, mode)

    def edit(node, attrs):
        node.input[0] = "not_a_tensor"
    _edit_epcontext(p, edit)
    _refused(p, "not_a_tensor")


def test_bad_embed_mode(seeds, tmp_path):
    p = _epc(seeds, tmp_path, 1)

    def edit(node, attrs):
        attrs["embed_mode"].i = 1 << 40
    _edit_epcontext(p, edit)
    _refused(p, "embed_mode")


def test_every_refusal_is_a_qnnrt_error():
    assert issubclass(FormatError, QnnrtError)


# -- .pte -------------------------------------------------------------------------------------

def _pte_with_tensor(tmp_path: Path, shape, dim_order=None) -> Path:
    import numpy as np

    from tests.helpers.pte_writer import PteBuilder, qnn_wrap
    b = PteBuilder()
    seg = b.add_segment(qnn_wrap(b"SEGCTX" * 50, signature=7))
    f = b.method("forward")
    x = f.tensor(np.float32, shape, dim_order=dim_order)
    y = f.tensor(np.float32, (2, 2))
    f.delegate_call(f.delegate("QnnBackend", segment=seg), [x, y])
    f.inputs, f.outputs = [x], [y]
    p = tmp_path / "model.pte"
    b.save(p)
    return p


def test_pte_terabyte_shape_is_refused_before_allocation(tmp_path):
    from qnnrt.executorch.reader import read_pte
    p = _pte_with_tensor(tmp_path, (1 << 20, 1 << 20, 1 << 10))
    with pytest.raises(FormatError, match="elements"):
        read_pte(p).close()
    _refused(p, "elements", options=LoadOptions(vet=False))


def test_pte_dim_order_longer_than_shape(tmp_path):
    from qnnrt.executorch.reader import read_pte
    p = _pte_with_tensor(tmp_path, (2, 3), dim_order=(0, 1, 2))
    with pytest.raises(FormatError, match="dim order"):
        read_pte(p).close()


def test_nul_byte_in_the_path_given_to_load():
    with pytest.raises(FormatError, match="NUL"):
        qnnrt.load("model\0.bin")


def test_invalid_utf8_node_name_from_protobuf(seeds, tmp_path):
    """Fuzzer find: a bit flip in a node name makes protobuf return bytes (TypeError before)."""
    p = _epc(seeds, tmp_path, 0)
    data = p.read_bytes()
    name = b"QNNExecutionProvider_"
    i = data.find(name)
    p.write_bytes(data[:i + 5] + b"\xdf" + data[i + 6:])
    _refused(p, "UTF-8")


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    "bin_00041.bin",                 # QNN's binary-info parse segfaults: it was read in-process before vetting
    "bin_00469.bin",                 # crashes QNN (creation / execute) only some of the times it is read
    "epc0_01103/model_ctx.onnx",     # the vetting child rejects it cleanly, reading it here segfaults
    "pte_00002_create_crash.pte",    # seed 21: segfaults in contextCreateFromBinary
    "pte_00014_execute_crash.pte",   # seed 21: passes info and creation, segfaults in graphExecute
])
def test_binaries_that_crash_qnn_never_take_the_api_process_down(tmp_path, case):
    """Found by the 10,000-input fuzz run (seed 11): nothing reads a foreign binary in this process
    before the vetting child has, and a binary the child refused is refused here too."""
    code = ("import qnnrt, sys, numpy as np\ntry:\n    p = qnnrt.load(sys.argv[1])\n    m = p.method()\n"
            "    p.run(m.name, {s.name: np.zeros(s.shape, s.dtype) for s in m.inputs})\n    p.close()\n"
            "    print('ran')\nexcept qnnrt.QnnrtError as e:\n    print(type(e).__name__, e)\n")
    env = dict(os.environ, QNNRT_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    for _ in range(2):  # the second time from the cached verdict
        r = subprocess.run([sys.executable, "-c", code, str(FUZZ_CASES / case)], capture_output=True,
                           text=True, env=env, timeout=300)
        assert r.returncode == 0, f"the API process died ({r.returncode}): {r.stderr[-600:]}"
        assert r.stdout.startswith("FormatError"), r.stdout
