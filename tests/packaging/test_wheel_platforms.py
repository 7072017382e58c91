"""The qnnrt wheel's dependencies resolve on every platform it is meant for, with the right ONNX
Runtime package: onnxruntime-qnn on x86_64 Linux and Windows x64/ARM64 (it brings the QNN libraries),
plain onnxruntime on Linux aarch64 (no onnxruntime-qnn wheel there; QNN comes from QNN_SDK_ROOT).

pip's --platform/--python-version only choose wheel tags: environment markers are still evaluated
for the machine pip runs on (pypa/pip#10050, #6117). So pip runs here through a small wrapper that
sets the marker environment of the target platform first (what pex does), then resolves with
`pip install --dry-run --only-binary=:all: --platform ... --python-version 3.11 --target ... --report`.
Needs the package index (PyPI, or $PIP_INDEX_URL); skipped, saying so, when it is unreachable. About
5 s per platform after the wheel build.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INDEX = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/").rstrip("/") + "/"
PYTHON_VERSION = "3.11"

# the marker environment of each target (PEP 508 names), and its wheel platform tags. glibc 2.35
# (Ubuntu 22.04, Yocto kirkstone, Debian 12 has 2.36): onnxruntime-qnn 2.7's Linux wheel is
# manylinux_2_35_x86_64, so older x86_64 distributions get no onnxruntime-qnn
PLATFORMS = {
    "manylinux_x86_64": (["manylinux_2_35_x86_64", "manylinux_2_28_x86_64", "manylinux2014_x86_64"],
                         dict(sys_platform="linux", platform_system="Linux", os_name="posix",
                              platform_machine="x86_64"), "onnxruntime-qnn"),
    "manylinux_aarch64": (["manylinux_2_35_aarch64", "manylinux_2_28_aarch64", "manylinux2014_aarch64"],
                          dict(sys_platform="linux", platform_system="Linux", os_name="posix",
                               platform_machine="aarch64"), "onnxruntime"),
    "win_amd64": (["win_amd64"], dict(sys_platform="win32", platform_system="Windows", os_name="nt",
                                      platform_machine="AMD64"), "onnxruntime-qnn"),
    "win_arm64": (["win_arm64"], dict(sys_platform="win32", platform_system="Windows", os_name="nt",
                                      platform_machine="ARM64"), "onnxruntime-qnn"),
}

# pip with the marker environment of the target: patch packaging's default_environment, run pip
_PIP_FOR_TARGET = r"""
import json, sys
target = json.loads(sys.argv[1])
from pip._vendor.packaging import markers
_host = markers.default_environment
def default_environment():
    env = _host()
    env.update(target)
    return env
markers.default_environment = default_environment
from pip._internal.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def marker_env(name: str) -> dict:
    env = dict(PLATFORMS[name][1])
    env.update(python_version=PYTHON_VERSION, python_full_version=PYTHON_VERSION + ".0",
               implementation_name="cpython", platform_python_implementation="CPython")
    return env


@pytest.fixture(scope="module")
def index_reachable() -> None:
    import urllib.error
    import urllib.request
    url = INDEX + "onnxruntime-qnn/"
    try:
        with urllib.request.urlopen(url, timeout=15) as r:
            r.read(1)
    except (urllib.error.URLError, OSError) as e:
        pytest.skip(f"the package index is unreachable ({url}: {e}): cannot resolve dependencies")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = out.glob("qnnrt-*.whl")
    return whl


def requires_dist(whl: Path) -> list[str]:
    import zipfile
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    return [l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("Requires-Dist:")]


@pytest.mark.slow
@pytest.mark.parametrize("name", PLATFORMS)
def test_markers_select_the_ort_package(wheel, name):
    """No network: the wheel's own Requires-Dist, evaluated for each target."""
    from packaging.requirements import Requirement
    env = marker_env(name)
    names = {Requirement(r).name for r in requires_dist(wheel)
             if not Requirement(r).marker or Requirement(r).marker.evaluate(env)}
    assert {"numpy", "onnx", "flatbuffers", "onnxruntime"} <= names
    assert ("onnxruntime-qnn" in names) == (PLATFORMS[name][2] == "onnxruntime-qnn")


def resolve(wheel: Path, name: str, tmp: Path) -> dict:
    tags, _, _ = PLATFORMS[name]
    report = tmp / f"report-{name}.json"
    cmd = [sys.executable, "-c", _PIP_FOR_TARGET, json.dumps(marker_env(name)),
           "install", "--dry-run", "--quiet", "--ignore-installed", "--only-binary=:all:",
           "--python-version", PYTHON_VERSION, "--implementation", "cp",
           "--target", str(tmp / f"target-{name}"), "--report", str(report)]
    for t in tags:
        cmd += ["--platform", t]
    r = subprocess.run(cmd + [str(wheel)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{name}: pip could not resolve qnnrt's dependencies:\n{r.stderr[-4000:]}"
    return json.loads(report.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name", PLATFORMS)
def test_resolves_with_the_right_ort(index_reachable, wheel, name, tmp_path):
    tags, _, ort = PLATFORMS[name]
    rep = resolve(wheel, name, tmp_path)
    files = {i["metadata"]["name"].lower().replace("_", "-"): i["download_info"]["url"].rsplit("/", 1)[-1]
             for i in rep["install"]}
    assert "qnnrt" in files and "onnxruntime" in files, files
    if ort == "onnxruntime-qnn":
        assert "onnxruntime-qnn" in files, files
    else:
        assert "onnxruntime-qnn" not in files, files
    arch = {"manylinux_x86_64": "x86_64", "manylinux_aarch64": "aarch64"}.get(name, name)
    for dist in ("onnxruntime", "onnxruntime-qnn", "numpy", "onnx"):
        if dist in files:
            assert files[dist].endswith(f"{arch}.whl"), (dist, files[dist])
    # binary wheels only, each fitting the platform (or pure Python)
    for dist, f in files.items():
        assert f.endswith(".whl"), (dist, f)
        assert f.endswith("-none-any.whl") or f.endswith(f"{arch}.whl"), (dist, f)
