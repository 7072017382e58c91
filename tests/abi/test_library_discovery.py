"""Library discovery per OS, with the OS, machine and folders laid out in a temp dir
(qnnrt._capi.platforms is a pure function of Host(os, machine, native_machine, env, root))."""
from __future__ import annotations

from pathlib import Path

import pytest

from qnnrt._capi import platforms as P
from qnnrt._capi.platforms import Host


def touch(p: Path) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"")
    return p


def sdk(tmp: Path, *targets: str, hexagon=(), windows=False) -> Path:
    """A fake QNN SDK with the backend + system libraries in lib/<target> and skels in hexagon-v*."""
    root = tmp / "qairt"
    b, s = ("QnnHtp.dll", "QnnSystem.dll") if windows else ("libQnnHtp.so", "libQnnSystem.so")
    for t in targets:
        touch(root / "lib" / t / b)
        touch(root / "lib" / t / s)
    for a in hexagon:
        touch(root / "lib" / f"hexagon-v{a}" / "unsigned" / f"libQnnHtpV{a}Skel.so")
        touch(root / "lib" / f"hexagon-v{a}" / "unsigned" / f"libqnnhtpv{a}.cat")
    return root


# ---- names and targets ----------------------------------------------------------------------

@pytest.mark.parametrize("os_, names", [
    ("linux", ("libQnnHtp.so", "libQnnSystem.so")), ("android", ("libQnnHtp.so", "libQnnSystem.so")),
    ("windows", ("QnnHtp.dll", "QnnSystem.dll"))])
def test_library_names(os_, names):
    assert P.library_names(Host(os_, "aarch64")) == names


@pytest.mark.parametrize("os_, machine, native, targets", [
    ("linux", "x86_64", "", ["x86_64-linux-clang"]),
    ("android", "aarch64", "", ["aarch64-android"]),
    ("windows", "ARM64", "", ["aarch64-windows-msvc", "arm64x-windows-msvc"]),
    ("windows", "AMD64", "ARM64", ["arm64x-windows-msvc", "x86_64-windows-msvc"]),  # x64 Python on Snapdragon
    ("windows", "AMD64", "AMD64", ["x86_64-windows-msvc"]),
    ("darwin", "arm64", "", []),
])
def test_sdk_targets(os_, machine, native, targets):
    assert P.sdk_targets(Host(os_, machine, native)) == targets


def test_linux_aarch64_targets_from_the_sdk_folders_newest_gcc_first(tmp_path):
    root = sdk(tmp_path, "aarch64-oe-linux-gcc9.3", "aarch64-oe-linux-gcc11.2", "aarch64-oe-linux-gcc12.4",
               "aarch64-ubuntu-gcc9.4", "aarch64-android", "x86_64-linux-clang")
    yocto = Host("linux", "aarch64", root=tmp_path / "rootfs")
    t = P.sdk_targets(yocto, root)
    assert t[:3] == ["aarch64-oe-linux-gcc12.4", "aarch64-oe-linux-gcc11.2", "aarch64-oe-linux-gcc9.3"]
    assert "aarch64-ubuntu-gcc9.4" in t and "aarch64-android" not in t and "x86_64-linux-clang" not in t
    touch(tmp_path / "rootfs" / "etc" / "os-release").write_text('NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n')
    assert P.sdk_targets(yocto, root)[0] == "aarch64-ubuntu-gcc9.4"


# ---- search order --------------------------------------------------------------------------

def test_order_explicit_then_sdk_then_package(tmp_path):
    root = sdk(tmp_path, "x86_64-linux-clang")
    pkg = tmp_path / "site" / "onnxruntime_qnn"
    touch(pkg / "libQnnHtp.so")
    h = Host("linux", "x86_64", env={"QNN_SDK_ROOT": str(root)})
    assert [w for w, _ in P.candidate_dirs(h, pkg)] == ["QNN_SDK_ROOT (x86_64-linux-clang)",
                                                       "onnxruntime_qnn package"]
    f = P.find_library(h, "libQnnHtp.so", ort_qnn_dir=pkg)
    assert f.path == root / "lib" / "x86_64-linux-clang" / "libQnnHtp.so"
    assert P.find_library(Host("linux", "x86_64"), "libQnnHtp.so", ort_qnn_dir=pkg).path == pkg / "libQnnHtp.so"
    # explicit: used, never a fallback
    assert P.find_library(h, "libQnnHtp.so", pkg / "libQnnHtp.so", pkg).why == "explicit path"
    miss = P.find_library(h, "libQnnHtp.so", tmp_path / "nope" / "libQnnHtp.so", pkg)
    assert miss.path is None and "explicit path" in P.not_found_message(h, "libQnnHtp.so", miss)


def test_windows_x64_wheel_subfolders(tmp_path):
    """onnxruntime-qnn's win_amd64 wheel: libs/amd64 (x64 PC) and libs/arm64ec (x64 Python on ARM64)."""
    pkg = tmp_path / "onnxruntime_qnn"
    for sub in ("amd64", "arm64ec"):
        touch(pkg / "libs" / sub / "QnnHtp.dll")
    on_snapdragon = Host("windows", "AMD64", "ARM64")
    f = P.find_library(on_snapdragon, "QnnHtp.dll", ort_qnn_dir=pkg)
    assert f.path == pkg / "libs" / "arm64ec" / "QnnHtp.dll" and P.is_device_backend(on_snapdragon, f.path)
    pc = Host("windows", "AMD64", "AMD64")
    f = P.find_library(pc, "QnnHtp.dll", ort_qnn_dir=pkg)
    assert f.path == pkg / "libs" / "amd64" / "QnnHtp.dll" and not P.is_device_backend(pc, f.path)


def test_windows_arm64_wheel_flat(tmp_path):
    pkg = tmp_path / "onnxruntime_qnn"
    touch(pkg / "QnnHtp.dll")
    h = Host("windows", "ARM64")
    assert P.find_library(h, "QnnHtp.dll", ort_qnn_dir=pkg).path == pkg / "QnnHtp.dll"


def test_windows_sdk_arm64(tmp_path):
    root = sdk(tmp_path, "aarch64-windows-msvc", "arm64x-windows-msvc", "x86_64-windows-msvc", windows=True)
    h = Host("windows", "ARM64", env={"QNN_SDK_ROOT": str(root)})
    assert P.find_library(h, "QnnSystem.dll").path == root / "lib" / "aarch64-windows-msvc" / "QnnSystem.dll"
    h = Host("windows", "AMD64", "ARM64", env={"QNN_SDK_ROOT": str(root)})
    assert P.find_library(h, "QnnHtp.dll").path == root / "lib" / "arm64x-windows-msvc" / "QnnHtp.dll"


def test_linux_aarch64_not_found_message_names_every_place_and_what_to_do(tmp_path):
    h = Host("linux", "aarch64", env={"QNN_SDK_ROOT": str(tmp_path / "wrong")})
    f = P.find_library(h, "libQnnHtp.so")
    msg = P.not_found_message(h, "libQnnHtp.so", f)
    assert f.path is None
    assert str(tmp_path / "wrong" / "lib" / "aarch64-oe-linux-gcc11.2" / "libQnnHtp.so") in msg
    assert "QNN_SDK_ROOT" in msg and "no wheel here" in msg
    bare_host = Host("linux", "aarch64")
    bare = P.not_found_message(bare_host, "libQnnHtp.so", P.find_library(bare_host, "libQnnHtp.so"))
    assert "QNN_SDK_ROOT is not set" in bare


# ---- skels and ADSP_LIBRARY_PATH ------------------------------------------------------------

def test_skel_in_the_sdk_hexagon_folder(tmp_path):
    root = sdk(tmp_path, "aarch64-oe-linux-gcc11.2", hexagon=(73, 75))
    h = Host("linux", "aarch64", env={"QNN_SDK_ROOT": str(root)}, root=tmp_path / "rootfs")
    bdir = root / "lib" / "aarch64-oe-linux-gcc11.2"
    c = P.check_skel(h, 73, bdir)
    assert c.ok and c.path == root / "lib" / "hexagon-v73" / "unsigned" / "libQnnHtpV73Skel.so"
    assert sorted(P.available_skels(h, bdir)) == [73, 75]
    env = {}
    v = P.setup_dsp_environment(h, bdir / "libQnnHtp.so", 73, env)
    assert v == env["ADSP_LIBRARY_PATH"]
    parts = v.split(";")
    assert parts[0] == str(root / "lib" / "hexagon-v73" / "unsigned")
    assert "/usr/lib/rfsa/adsp" in parts and "/dsp" in parts


def test_missing_skel_for_the_socs_arch_is_a_clear_error(tmp_path):
    root = sdk(tmp_path, "aarch64-oe-linux-gcc11.2", hexagon=(73,))
    h = Host("linux", "aarch64", env={"QNN_SDK_ROOT": str(root)}, root=tmp_path / "rootfs")
    c = P.check_skel(h, 79, root / "lib" / "aarch64-oe-linux-gcc11.2")
    assert not c.ok
    msg = c.message(h)
    assert "V79" in msg and "libQnnHtpV79Skel.so" in msg and "hexagon-v79" in msg
    assert str(tmp_path / "rootfs" / "usr" / "lib" / "rfsa" / "adsp" / "libQnnHtpV79Skel.so") in msg
    assert P.setup_dsp_environment(h, root / "lib" / "aarch64-oe-linux-gcc11.2" / "libQnnHtp.so", 79, {}) is None


def test_skel_from_the_device_image(tmp_path):
    """QCS boards ship skels in /usr/lib/rfsa/adsp; found there (inside root) when nowhere else."""
    skel = touch(tmp_path / "rootfs" / "usr" / "lib" / "rfsa" / "adsp" / "libQnnHtpV73Skel.so")
    h = Host("linux", "aarch64", root=tmp_path / "rootfs")
    assert P.check_skel(h, 73, tmp_path / "somewhere").path == skel


def test_user_adsp_library_path_is_searched_first_and_never_overridden(tmp_path):
    mine = tmp_path / "mine"
    touch(mine / "libQnnHtpV73Skel.so")
    root = sdk(tmp_path, "aarch64-android", hexagon=(73,))
    env = {"ADSP_LIBRARY_PATH": f"{mine};/vendor/lib/rfsa/adsp", "QNN_SDK_ROOT": str(root)}
    h = Host("android", "aarch64", env=env, root=tmp_path / "rootfs")
    assert P.check_skel(h, 73, root / "lib" / "aarch64-android").path == mine / "libQnnHtpV73Skel.so"
    assert P.adsp_library_path(h, mine) is None
    assert P.setup_dsp_environment(h, root / "lib" / "aarch64-android" / "libQnnHtp.so", 73, env) is None
    assert env["ADSP_LIBRARY_PATH"] == f"{mine};/vendor/lib/rfsa/adsp"


def test_windows_skel_beside_the_dll_needs_its_catalog(tmp_path):
    pkg = tmp_path / "onnxruntime_qnn"
    touch(pkg / "QnnHtp.dll")
    touch(pkg / "libQnnHtpV73Skel.so")
    touch(pkg / "libqnnhtpv73.cat")
    touch(pkg / "libQnnHtpV81Skel.so")          # no libqnnhtpv81.cat
    h = Host("windows", "ARM64")
    assert P.check_skel(h, 73, pkg).ok
    c = P.check_skel(h, 81, pkg)
    assert not c.ok and c.missing_cat == pkg / "libqnnhtpv81.cat" and "catalog" in c.message(h)
    # no Linux device folders on Windows
    assert all("rfsa" not in str(p) for _, p in P.skel_dirs(h, pkg))
    env = {}
    assert P.setup_dsp_environment(h, pkg / "QnnHtp.dll", 73, env) == str(pkg)


def test_simulator_is_not_a_device_backend(tmp_path):
    assert not P.is_device_backend(Host("linux", "x86_64"), tmp_path / "libQnnHtp.so")
    assert P.is_device_backend(Host("linux", "aarch64"), tmp_path / "lib" / "aarch64-oe-linux-gcc11.2" / "libQnnHtp.so")


def test_detect_host_here():
    h = P.detect_host({"QNN_SDK_ROOT": "/x"})
    assert h.os == "linux" and h.machine in ("x86_64", "aarch64") and h.env["QNN_SDK_ROOT"] == "/x"


def test_the_loaded_backend_says_whether_it_is_the_simulator():
    """Decided by the library and the hardware, not by this process's architecture: the x86_64
    onnxruntime-qnn libraries here are the simulator."""
    from qnnrt._capi.library import open_library
    lib = open_library()
    assert lib.is_simulator is True
