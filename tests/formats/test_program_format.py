"""program.json: reading, validation errors (what, where, what to do), writing."""
from __future__ import annotations

import json
import os

import pytest

from qnnrt.errors import FormatError
from qnnrt.formats.program import (ContextEntry, MethodEntry, check_method_files, read_program,
                                   write_program)


@pytest.fixture
def program(tmp_path):
    (tmp_path / "contexts").mkdir()
    (tmp_path / "contexts" / "ctx_000.bin").write_bytes(b"\0" * 100)
    (tmp_path / "forward.onnx").write_bytes(b"")
    write_program(tmp_path, [MethodEntry("forward", "forward.onnx")],
                  [ContextEntry("ctx_000", "contexts/ctx_000.bin", 100, ["g0"])],
                  target={"soc_model": 43, "htp_arch": 73}, build={"tool": "qnnrt"})
    return tmp_path


def _edit(folder, fn):
    path = folder / "program.json"
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def test_roundtrip(program):
    man = read_program(program)
    assert man.method("forward").path == program / "forward.onnx"
    assert man.context("ctx_000").file == program / "contexts" / "ctx_000.bin"
    assert man.context_of_graph("g0").name == "ctx_000"
    assert man.soc_model == 43 and man.total_context_bytes == 100
    assert read_program(program / "program.json").methods[0].name == "forward"


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.update(format="other"), "not 'qnnrt-program'"),
    (lambda d: d.update(version=2), "version 2 is not supported"),
    (lambda d: d.update(version="1"), "version must be an integer"),
    (lambda d: d.pop("methods"), "missing field 'methods'"),
    (lambda d: d.update(methods=[]), "'methods' is empty"),
    (lambda d: d["methods"].append({"name": "forward", "model": "forward.onnx"}), "duplicate method name"),
    (lambda d: d["methods"][0].update(model="../x.onnx"), r"methods\[0\].model.*escapes the program folder"),
    (lambda d: d["methods"][0].update(model="/etc/passwd"), "is absolute"),
    (lambda d: d["methods"][0].update(model="gone.onnx"), "'gone.onnx' is missing"),
    (lambda d: d["contexts"][0].update(size=99), "100 bytes but the manifest says 99"),
    (lambda d: d["contexts"][0].update(size=True), "must be a int"),
    (lambda d: d["contexts"][0].update(graphs=[]), "non-empty list of graph names"),
    (lambda d: d["contexts"][0].update(graphs=["a", "a"]), "duplicate graph names"),
    (lambda d: d["contexts"][0].pop("path"), r"contexts\[0\].*missing field 'path'"),
    (lambda d: d["target"].update(soc_model="43"), "target.soc_model must be an integer"),
])
def test_malformed_manifests(program, edit, match):
    _edit(program, edit)
    with pytest.raises(FormatError, match=match) as e:
        read_program(program)
    assert "program.json" in str(e.value)


def test_symlink_escaping_the_folder(program, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "x.bin"
    outside.write_bytes(b"\0" * 100)
    os.remove(program / "contexts" / "ctx_000.bin")
    os.symlink(outside, program / "contexts" / "ctx_000.bin")
    with pytest.raises(FormatError, match="outside the program folder"):
        read_program(program)


def test_not_json_and_not_a_program(program, tmp_path_factory):
    (program / "program.json").write_text("{")
    with pytest.raises(FormatError, match="not valid JSON"):
        read_program(program)
    with pytest.raises(FormatError, match="no program.json"):
        read_program(tmp_path_factory.mktemp("empty"))
    with pytest.raises(FormatError, match="no such directory"):
        read_program(program / "nope")


def test_method_file_naming_an_unlisted_graph(built_tiny_program, tmp_path):
    import shutil
    dst = tmp_path / "p"
    shutil.copytree(built_tiny_program.out, dst)
    _edit(dst, lambda d: d["contexts"][5].update(graphs=["other"]))
    with pytest.raises(FormatError, match="is not among the graphs the manifest lists"):
        check_method_files(read_program(dst))
