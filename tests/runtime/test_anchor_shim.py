"""The ExecuTorch kit's shim (bench/anchor/qnn_shim.c, built here from the repository) in front of
qnnrt: QNN_SHIM_TIME_FILE counts every graphExecute and the time inside it, QNN_SHIM_NOOP_EXEC makes
them return at once, QNN_SHIM_FAIL_EXEC fails the ones it names. (test_perf_votes.py covers
QNN_SHIM_PERF_LOG; the device-config repacking for ExecuTorch is checked by running ExecuTorch itself,
bench/anchor/README.md.)"""
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from qnnrt._capi.platforms import find_ort_qnn_package
from tests.helpers.data import EXECUTORCH
from tests.helpers.perf_log import build_shim

FIXTURE = EXECUTORCH / "many_4_fp16"   # 4 graph calls


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    pkg = find_ort_qnn_package()
    real = pkg / "libQnnHtp.so" if pkg is not None else None
    if real is None or not real.is_file():
        pytest.skip("no onnxruntime_qnn package with libQnnHtp.so")
    return build_shim(tmp_path_factory.mktemp("anchor_shim") / "lib", real), real


def _run(shim, *args, **variables) -> subprocess.CompletedProcess:
    lib, real = shim
    env = {k: v for k, v in os.environ.items() if not k.startswith("QNN_SHIM_")}
    env.update(QNN_SHIM_REAL=str(real), QNN_SHIM_NO_FIX="1", QNN_SHIM_KEEP_PLATFORM="1", **variables)
    return subprocess.run([sys.executable, "-m", "qnnrt", "run", str(FIXTURE / "model.pte"), "--inputs",
                           str(FIXTURE / "forward_input_0.npy"), "--no-vet", "--quiet", "--backend-lib", str(lib),
                           *args], capture_output=True, text=True, env=env, timeout=600)


def _counters(path: Path) -> tuple[int, int]:
    return struct.unpack("<QQ", path.read_bytes()[:16])


@pytest.mark.slow
def test_time_file_counts_every_graph_call_and_noop_skips_them(shim, tmp_path):
    real, noop = tmp_path / "real.bin", tmp_path / "noop.bin"
    args = ("--iteration", "2", "--warm-up", "0", "--residency", "eager")
    r = _run(shim, *args, QNN_SHIM_TIME_FILE=str(real))
    assert r.returncode == 0, r.stderr[-3000:]
    r = _run(shim, *args, QNN_SHIM_TIME_FILE=str(noop), QNN_SHIM_NOOP_EXEC="1")
    assert r.returncode == 0, r.stderr[-3000:]
    (calls, ns), (noop_calls, noop_ns) = _counters(real), _counters(noop)
    assert calls == noop_calls == 8          # 2 iterations x 4 delegates
    # the simulator takes milliseconds per call; a call that returns at once, microseconds
    assert ns > 8 * 200_000 and noop_ns < 8 * 100_000 and noop_ns * 20 < ns


@pytest.mark.slow
def test_fail_exec_fails_the_named_call(shim):
    r = _run(shim, "--iteration", "2", "--max-recoveries", "0", QNN_SHIM_FAIL_EXEC="3")
    assert r.returncode == 1
    assert "QNN error 1100" in r.stderr and "segment:3" in r.stderr
    r = _run(shim, "--iteration", "2", QNN_SHIM_FAIL_EXEC="3:1011")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "1011" in r.stdout + r.stderr
