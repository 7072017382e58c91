"""`qnnrt build` without a terminal (a CI log, a pipe) prints a progress line every interval that
counts the contexts compiled, with the ETA; `--no-progress` prints none."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.helpers.cli_helpers import qnnrt


def _chain(path, n: int) -> None:
    """n Relu-Add blocks with a Sin (kept on the CPU below) between them: n HTP partitions."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    b = onnx.numpy_helper.from_array(np.linspace(-1, 1, 8).astype(np.float32), "b")
    nodes, t = [], "x"
    for i in range(n):
        nodes += [helper.make_node("Add", [t, "b"], [f"a{i}"]), helper.make_node("Relu", [f"a{i}"], [f"r{i}"])]
        t = f"r{i}"
        if i < n - 1:
            nodes.append(helper.make_node("Sin", [t], [f"s{i}"]))
            t = f"s{i}"
    nodes.append(helper.make_node("Identity", [t], ["y"]))
    m = helper.make_model(helper.make_graph(nodes, "m", [x], [y], [b]), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(path))


def test_build_without_a_terminal_prints_progress_lines(tmp_path, monkeypatch):
    _chain(tmp_path / "m.onnx", 3)
    monkeypatch.setenv("QNNRT_PROGRESS_INTERVAL", "0.05")
    r = qnnrt("build", tmp_path / "m.onnx", "-o", tmp_path / "p", "--cpu-ops", "Sin", "--no-cache")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("compiling: ")]
    assert lines, r.stderr
    assert all("/3 contexts" in x and x.endswith("s elapsed") for x in lines), lines
    r = qnnrt("build", tmp_path / "m.onnx", "-o", tmp_path / "q", "--cpu-ops", "Sin", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert not [x for x in r.stderr.splitlines() if x.startswith("compiling")], r.stderr
