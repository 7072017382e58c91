"""`qnnrt doctor` on this machine (the x86 HTP simulator of onnxruntime-qnn: all green, exit 0) and
with a broken set-up (names the problem and what to do, exit 1)."""
from __future__ import annotations

import argparse
import json
import re

import pytest

from qnnrt._capi import platforms
from qnnrt.cli import doctor
from qnnrt.runtime.residency.budget import SIMULATOR_CAPACITY
from tests.helpers.cli_helpers import qnnrt


@pytest.fixture(autouse=True)
def _no_sdk_root(monkeypatch):
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    monkeypatch.delenv("ADSP_LIBRARY_PATH", raising=False)


@pytest.mark.slow
def test_doctor_here_is_green_with_the_json_fields():
    r = qnnrt("doctor", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(r.stdout)
    assert d["ok"] is True and d["problems"] == []
    assert not [c for c in d["checks"] if c["status"] in ("fail", "warn")], d["checks"]
    assert d["platform"]["os"] == "linux" and d["platform"]["python"].startswith("3.")
    assert d["platform"]["log_formatter"] == "C library of this process vsnprintf"
    assert d["qnnrt"]["version"]
    htp = d["libraries"]["libQnnHtp.so"]
    assert htp["path"].endswith("onnxruntime_qnn/libQnnHtp.so") and htp["why"] == "onnxruntime_qnn package"
    assert d["libraries"]["libQnnSystem.so"]["path"].endswith("libQnnSystem.so")
    assert [s["why"] for s in d["search_order"]] == ["onnxruntime_qnn package"]
    api = d["api"]
    assert api["provider"] == "HTP_QTI_AISW" and api["core_api"].startswith("2.")
    assert api["htp_api"].startswith("5.") and api["system_api"].startswith("1.")
    assert re.match(r"v2\.\d+\.\d+", api["build_id"]) and api["reported_htp_api"] == api["htp_api"]
    assert d["backend"]["created"] is True and d["device_backend"] is False
    (dev,) = d["devices"]
    assert dev["soc_model"] > 0 and dev["htp_arch"] in (68, 69, 73, 75, 79, 81) and dev["vtcm_mb"] > 0
    assert d["dsp_heap_profiling"] is False          # the simulator refuses HTP context option 4
    assert d["pd_budget"]["bytes"] == SIMULATOR_CAPACITY and d["pd_budget"]["source"] == "simulator"
    assert d["onnxruntime"]["available"] is True
    feats = d["performance_features"]            # tried on the simulator: votes yes, the others no
    assert feats["performance votes"]["offered"] is True
    assert feats["shared buffers"]["offered"] is False and "libcdsprpc" in feats["shared buffers"]["detail"]
    assert feats["spill-fill groups"]["offered"] is False and "5010" in feats["spill-fill groups"]["detail"]


@pytest.mark.slow
def test_doctor_table_and_probe_pd(tmp_path):
    r = qnnrt("doctor", "--probe-pd")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "runs would work" in r.stdout and "what to do" not in r.stdout
    # the simulator reports its own platform (SM8350 / v68); the table says why builds target SM8550 / v73
    assert "the simulator's own default platform" in r.stdout and "compiles for SM8550 / HTP v73" in r.stdout
    assert "capacity 3,650,722,201 B" in r.stdout and "learned on this backend" in r.stdout
    learned = json.loads((tmp_path / "pd_budget.json").read_text())   # the test's private cache
    assert [v["capacity_bytes"] for v in learned.values()] == [SIMULATOR_CAPACITY]


@pytest.mark.slow
def test_wrong_sdk_root_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("QNN_SDK_ROOT", str(tmp_path / "qairt"))
    r = qnnrt("doctor")
    assert r.returncode == 1, r.stdout
    assert "FAIL  QNN_SDK_ROOT" in r.stdout
    assert str(tmp_path / "qairt" / "lib" / "x86_64-linux-clang" / "libQnnHtp.so") in r.stdout
    assert "what to do: point QNN_SDK_ROOT at a QNN SDK root" in r.stdout
    assert "1 problem(s): QNN_SDK_ROOT" in r.stdout


def test_wrong_backend_lib_is_named(tmp_path):
    r = qnnrt("doctor", "--json", "--backend-lib", tmp_path / "nope" / "libQnnHtp.so")
    assert r.returncode == 1
    d = json.loads(r.stdout)
    (p,) = d["problems"]
    assert p["name"] == "libQnnHtp.so" and "explicit path" in p["detail"] and "nope" in p["detail"]
    assert "--backend-lib" in p["fix"]
    assert d["onnxruntime"]["available"] is True   # checked even when QNN is missing


def test_no_libraries_anywhere_names_every_place_and_qnn_sdk_root(tmp_path, monkeypatch):
    """What a Linux aarch64 board without a QNN SDK sees (in-process; the library search is the
    real one with the onnxruntime_qnn package hidden)."""
    monkeypatch.setenv("QNN_SDK_ROOT", str(tmp_path / "sdk"))
    monkeypatch.setattr(platforms, "find_ort_qnn_package", lambda: None)
    args = argparse.Namespace(backend_lib=None, soc=None, binary=None, probe_pd=False, log_level="warn",
                              json=True)
    rep = doctor.diagnose(args)
    assert not rep.ok
    (p,) = [c for c in rep.checks if c.status == "fail"]
    assert p.name == "libQnnHtp.so" and str(tmp_path / "sdk" / "lib" / "x86_64-linux-clang") in p.detail
    assert "QNN_SDK_ROOT" in p.fix
    assert rep.to_json()["libraries"]["libQnnHtp.so"]["path"] is None


def test_device_backend_without_the_skel_for_the_reported_arch(tmp_path, monkeypatch):
    """On a device backend, doctor checks the skel for the HTP arch the device reports (here the
    simulator's, with the backend treated as a device one) and names every folder looked in."""
    monkeypatch.setattr(platforms, "is_device_backend", lambda host, path: True)
    monkeypatch.setenv("ADSP_LIBRARY_PATH", str(tmp_path / "adsp"))
    args = argparse.Namespace(backend_lib=None, soc=None, binary=None, probe_pd=False, log_level="warn",
                              json=True)
    rep = doctor.diagnose(args)
    arch = rep.data["devices"][0]["htp_arch"]
    (skel,) = [c for c in rep.checks if c.name == "HTP skel"]
    assert skel.status == "fail" and f"libQnnHtpV{arch}Skel.so" in skel.detail
    assert str(tmp_path / "adsp" / f"libQnnHtpV{arch}Skel.so") in skel.detail
    assert f"hexagon-v{arch}" in skel.fix and not rep.ok
