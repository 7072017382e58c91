"""The Done-when check of issue 20, as a test: qnnrt makes the same HTP perf-infrastructure calls as
ExecuTorch 1.5.1 on the same .pte, with the same payloads apart from the power config id. ExecuTorch's
calls were logged by the ExecuTorch comparison kit's shim (QNN_SHIM_PERF_LOG; bench/anchor/README.md) and
are kept in tests/data/perf; qnnrt runs through the same shim, built here from bench/anchor/qnn_shim.c."""
import os
import subprocess
import sys

import pytest

from qnnrt._capi.platforms import find_ort_qnn_package
from tests.helpers.data import PERF_LOGS, executorch_pte
from tests.helpers.perf_log import build_shim, normalized_calls

PTE = executorch_pte("add_relu_mul_fp16")
ET_LOG = PERF_LOGS / "executorch_1.5.1_add_relu_mul_fp16.perf.log"


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    pkg = find_ort_qnn_package()   # the real library (QNN_SDK_ROOT may point at a shim already)
    real = pkg / "libQnnHtp.so" if pkg is not None else None
    if real is None or not real.is_file():
        pytest.skip("no onnxruntime_qnn package with libQnnHtp.so")
    return build_shim(tmp_path_factory.mktemp("shim") / "lib", real), real


def _qnnrt_perf_log(shim, tmp_path, *args) -> list[str]:
    lib, real = shim
    log = tmp_path / "perf.log"
    env = dict(os.environ, QNN_SHIM_REAL=str(real), QNN_SHIM_PERF_LOG=str(log), QNN_SHIM_NO_FIX="1",
               QNN_SHIM_KEEP_PLATFORM="1")
    r = subprocess.run([sys.executable, "-m", "qnnrt", "run", str(PTE), "--iteration", "1", "--no-vet",
                        "--backend-lib", str(lib), "--quiet", *args],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return normalized_calls(log.read_text()) if log.exists() else []


def test_same_calls_and_payloads_as_executorch(shim, tmp_path):
    ours = _qnnrt_perf_log(shim, tmp_path)
    theirs = normalized_calls(ET_LOG.read_text())
    assert ours == theirs
    assert len(ours) == 10 and ours[0] == "deviceGetInfrastructure type=0"


def test_default_mode_makes_no_perf_call(shim, tmp_path):
    assert _qnnrt_perf_log(shim, tmp_path, "--htp-performance-mode", "default") == []


def test_an_option_changes_the_payload(shim, tmp_path):
    ours = _qnnrt_perf_log(shim, tmp_path, "--htp-performance-mode", "balanced",
                           "--rpc-polling-time", "100")
    up = next(x for x in ours if "cfg[0] option=1" in x)
    # sleep latency 1000 (e8030000) and corners NOM_PLUS (0x70) where ExecuTorch's burst has 40 / MAX
    assert "e8030000" in up and "70000000" in up and "a0000000" not in up
    assert any("option=3 bytes=0300000064000000" in x for x in ours)
