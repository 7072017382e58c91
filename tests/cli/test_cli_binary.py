"""`qnnrt inspect` and `qnnrt run` on context binaries, including every kind of bad input."""
import json

import numpy as np
import pytest

from tests.helpers.cli_helpers import qnnrt
from tests.helpers.qnn_fixtures import WIDTH, add_relu_mul_ref


@pytest.mark.slow
def test_inspect_table_and_json(small_binary):
    r = qnnrt("inspect", small_binary.path)
    assert r.returncode == 0, r.stderr
    assert "FLOAT_32" in r.stdout and "1x64" in r.stdout and small_binary.graphs[0] in r.stdout
    r = qnnrt("inspect", small_binary.path, "--json")
    d = json.loads(r.stdout)  # stdout is pure JSON (the QNN library banner is kept out of it)
    assert d["soc_model"] == 43
    g = d["graphs"][0]
    assert g["inputs"][0] == {"name": "x", "dtype": "FLOAT_32", "numpy_dtype": "float32",
                              "shape": [1, WIDTH], "quantization": None}


def test_run_outputs_match_reference(small_binary, tmp_path):
    x = np.linspace(-3, 3, WIDTH, dtype=np.float32)[None]
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    r = qnnrt("run", small_binary.path, "--inputs", tmp_path / "x.npy", "--iteration", 3,
              "--warm-up", 1, "--output-dir", out, "--report", tmp_path / "r.json")
    assert r.returncode == 0, r.stderr
    assert "median" in r.stdout and "p90" in r.stdout
    y = np.load(out / "y.npy")
    np.testing.assert_allclose(y, add_relu_mul_ref(x), rtol=2e-2, atol=2e-2)
    raws = sorted(p.name for p in out.glob("output_*_*.raw"))
    assert raws == ["output_0_0.raw", "output_1_0.raw", "output_2_0.raw"]
    np.testing.assert_array_equal(np.fromfile(out / "output_2_0.raw", np.float32).reshape(1, -1), y)
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["iterations"] == 3 and rep["warm_up"] == 1 and len(rep["latency_ms"]["all"]) == 3


@pytest.mark.slow
def test_run_input_list_raw_and_named(small_binary, tmp_path):
    xs = [np.full((1, WIDTH), v, np.float32) for v in (0.5, -1.0)]
    for i, x in enumerate(xs):
        x.tofile(tmp_path / f"x{i}.raw")
    (tmp_path / "list.txt").write_text("x0.raw\n# comment\nx:=x1.raw\n")
    out = tmp_path / "out"
    r = qnnrt("run", small_binary.path, "--input-list", tmp_path / "list.txt", "--iteration", 2,
              "--output-dir", out)
    assert r.returncode == 0, r.stderr
    for i, x in enumerate(xs):
        y = np.fromfile(out / f"output_{i}_0.raw", np.float32).reshape(1, WIDTH)
        np.testing.assert_allclose(y, add_relu_mul_ref(x), rtol=2e-2, atol=2e-2)


@pytest.mark.slow
def test_run_random_inputs_says_so(small_binary):
    r = qnnrt("run", small_binary.path, "--check-repeat", "--iteration", 3)
    assert r.returncode == 0, r.stderr
    assert "random inputs" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["missing", "empty", "truncated", "random", "text", "directory"])
def test_bad_binary_files_exit_1(small_binary, tmp_path, kind):
    p = tmp_path / "bad.bin"
    data = small_binary.path.read_bytes()
    if kind == "empty":
        p.write_bytes(b"")
    elif kind == "truncated":
        p.write_bytes(data[: len(data) // 3])
    elif kind == "random":
        p.write_bytes(np.random.default_rng(0).bytes(len(data)))
    elif kind == "text":
        p.write_text("this is not a context binary\n" * 100)
    elif kind == "directory":
        p.mkdir()
    for cmd in (["inspect", p], ["run", p]):
        r = qnnrt(*cmd)
        assert r.returncode == 1, (kind, r.returncode, r.stderr)
        assert "error:" in r.stderr and "Traceback" not in r.stderr
        assert str(p.name) in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("case,pattern", [
    ("shape", "shape"), ("dtype", "dtype"), ("count", "input"), ("name", "unknown input"),
    ("graph", "no graph named"), ("missing_npy", "does not exist"), ("raw_size", "bytes"),
])
def test_bad_run_arguments_exit_1(small_binary, tmp_path, case, pattern):
    good = tmp_path / "x.npy"
    np.save(good, np.zeros((1, WIDTH), np.float32))
    args = ["run", small_binary.path]
    if case == "shape":
        np.save(tmp_path / "s.npy", np.zeros((2, WIDTH), np.float32))
        args += ["--inputs", tmp_path / "s.npy"]
    elif case == "dtype":
        np.save(tmp_path / "d.npy", np.zeros((1, WIDTH), np.int32))
        args += ["--inputs", tmp_path / "d.npy"]
    elif case == "count":
        args += ["--inputs", f"{good},{good}"]
    elif case == "name":
        args += ["--inputs", f"nope:={good}"]
    elif case == "graph":
        args += ["--graph", "nope"]
    elif case == "missing_npy":
        args += ["--inputs", tmp_path / "none.npy"]
    elif case == "raw_size":
        (tmp_path / "x.raw").write_bytes(b"\0" * 7)
        args += ["--inputs", tmp_path / "x.raw"]
    r = qnnrt(*args)
    assert r.returncode == 1, r.stderr
    assert pattern in r.stderr and "Traceback" not in r.stderr
