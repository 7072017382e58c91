"""The CLI never ends in a signal or a traceback: crashes inside QNN, malformed models and reports,
input-list paths, output file names."""
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from qnnrt.cli.io_files import read_input_list, write_outputs
from qnnrt.runtime.method_spec import IOSpec
from tests.helpers.data import CORRUPT_PTE
from tests.helpers.cli_helpers import qnnrt
from tests.helpers.program_fixtures import epcontext_node, save_model
from tests.helpers.qnn_fixtures import WIDTH



@pytest.mark.slow
def test_crash_inside_qnn_is_exit_1_with_a_message():
    """A .pte whose delegate binary is damaged so that QNN's binary-info reader segfaults."""
    for cmd in ("inspect", "run"):
        r = qnnrt(cmd, CORRUPT_PTE)
        assert r.returncode == 1, r.stderr
        assert "QNN library crashed (SIGSEGV)" in r.stderr and "corrupt" in r.stderr


@pytest.mark.slow
def test_usage_errors_exit_1_and_help_exits_0():
    assert qnnrt("run").returncode == 1
    assert qnnrt("run", "x", "--residency").returncode == 1
    r = qnnrt("--help")
    assert r.returncode == 0 and "inspect" in r.stdout


@pytest.mark.slow
def test_malformed_epcontext_attribute(tmp_path, small_binary):
    (tmp_path / "c.bin").write_bytes(small_binary.path.read_bytes())
    node = epcontext_node(small_binary.graphs[0], "c.bin", ["x"], ["y"])
    for a in node.attribute:
        if a.name == "embed_mode":
            a.CopyFrom(helper.make_attribute("embed_mode", [0, 0]))
    save_model([node], [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, WIDTH])],
               [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, WIDTH])],
               tmp_path / "m.onnx")
    for cmd in ("inspect", "run"):
        r = qnnrt(cmd, tmp_path / "m.onnx")
        assert r.returncode == 1 and "embed_mode" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_malformed_reports_for_plot(tmp_path):
    for bad in ({"heap": {"timeline": [1, 2]}}, {"profile": {"graphs": [{"qnn_us": {"total": "5"}}]}}):
        (tmp_path / "r.json").write_text(json.dumps(bad))
        r = qnnrt("plot", tmp_path / "r.json", "-o", tmp_path / "r.png")
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr


def test_input_list_paths_are_relative_to_the_list(tmp_path, monkeypatch):
    spec = IOSpec("x", (1, 4), np.dtype(np.float32))
    (tmp_path / "lists").mkdir()
    np.full((1, 4), 5, np.float32).tofile(tmp_path / "lists" / "x.raw")
    np.full((1, 4), -5, np.float32).tofile(tmp_path / "x.raw")  # same name in the cwd
    (tmp_path / "lists" / "in.txt").write_text("x.raw\r\n\r\nx:=x.raw\n")
    monkeypatch.chdir(tmp_path)
    feeds = read_input_list(Path("lists/in.txt"), [spec])
    assert len(feeds) == 2 and all(float(f["x"][0, 0]) == 5 for f in feeds)


def test_output_names_that_collide_as_file_names(tmp_path):
    outs = {"out/0": np.zeros(2, np.float32), "out_0": np.ones(2, np.float32)}
    write_outputs(tmp_path, 0, outs, npy=True)
    assert sorted(p.name for p in tmp_path.glob("*.npy")) == ["out_0.npy", "out_0_1.npy"]
    assert np.load(tmp_path / "out_0_1.npy")[0] == 1
