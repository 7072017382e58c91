"""Finding the QNN libraries: explicit path, QNN_SDK_ROOT, then the onnxruntime_qnn package."""
import importlib.util
from pathlib import Path

import pytest

from qnnrt._capi import library
from qnnrt.errors import LibraryNotFoundError
from tests.helpers.cli_helpers import qnnrt


def package_dir() -> Path:
    return Path(importlib.util.find_spec("onnxruntime_qnn").origin).parent


def test_order_sdk_root_before_package(tmp_path, monkeypatch):
    monkeypatch.setenv("QNN_SDK_ROOT", str(tmp_path))
    dirs = library.candidate_dirs()
    assert dirs[0][1] == tmp_path / "lib" / "x86_64-linux-clang"
    assert dirs[-1][1] == package_dir()
    # nothing in the SDK folder: the package is used
    assert library.find_library("libQnnHtp.so") == (package_dir() / "libQnnHtp.so").resolve()


def test_sdk_root_wins_when_it_has_the_library(tmp_path, monkeypatch):
    d = tmp_path / "lib" / "x86_64-linux-clang"
    d.mkdir(parents=True)
    (d / "libQnnSystem.so").symlink_to(package_dir() / "libQnnSystem.so")
    monkeypatch.setenv("QNN_SDK_ROOT", str(tmp_path))
    assert library.find_library("libQnnSystem.so") == (d / "libQnnSystem.so").resolve()


def test_missing_everywhere_names_every_place(tmp_path, monkeypatch):
    monkeypatch.setenv("QNN_SDK_ROOT", str(tmp_path))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n, *a: None if n == "onnxruntime_qnn" else real(n, *a))
    with pytest.raises(LibraryNotFoundError) as ei:
        library.find_library("libQnnHtp.so")
    msg = str(ei.value)
    assert str(tmp_path / "lib" / "x86_64-linux-clang" / "libQnnHtp.so") in msg
    assert "pip install onnxruntime-qnn" in msg


def test_explicit_path_is_used_and_never_falls_back(tmp_path):
    assert library.find_library("libQnnHtp.so", package_dir() / "libQnnHtp.so") == \
        (package_dir() / "libQnnHtp.so").resolve()
    with pytest.raises(LibraryNotFoundError, match="explicit path"):
        library.find_library("libQnnHtp.so", tmp_path / "libQnnHtp.so")


def test_explicit_folder_is_searched(tmp_path):
    """--backend-lib may name a folder; the system library is taken from beside the backend."""
    for name in ("libQnnHtp.so", "libQnnSystem.so"):
        (tmp_path / name).symlink_to(package_dir() / name)
    assert library.find_library("libQnnHtp.so", tmp_path) == (package_dir() / "libQnnHtp.so").resolve()
    lib = library.open_library(tmp_path)
    assert lib.provider_name == "HTP_QTI_AISW"
    assert lib.system_path == (package_dir() / "libQnnSystem.so").resolve()


@pytest.mark.slow
def test_cli_bad_backend_lib(small_binary, tmp_path):
    r = qnnrt("run", small_binary.path, "--backend-lib", tmp_path / "nope" / "libQnnHtp.so")
    assert r.returncode == 1 and "explicit path" in r.stderr and "nope" in r.stderr
