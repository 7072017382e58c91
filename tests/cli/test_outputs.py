"""Every file qnnrt writes goes through qnnrt.fileio: never through a link, never half a file, a
full disk stops the run at once, targets are checked before the work; manifests and input sizes
are enforced before anything runs or is allocated."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import qnnrt
from qnnrt import fileio
from qnnrt.cli import io_files
from qnnrt.errors import FormatError, InputError, QnnrtError
from qnnrt.runtime.method_spec import IOSpec
from tests.helpers.data import CORRUPT_PTE
from tests.helpers.cli_helpers import qnnrt as cli
from tests.helpers.program_fixtures import epcontext_node, save_model
from tests.helpers.qnn_fixtures import WIDTH



@pytest.fixture
def small_fs(tmp_path):
    """A 512 KiB tmpfs (we are root in CI); skipped where mounting is not allowed."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()})")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def read_only_dir(small_fs):
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    return small_fs


@pytest.mark.slow
def test_symlink_planted_in_output_dir_is_refused(tmp_path, small_binary):
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / "output_0_0.raw").symlink_to(victim)
    r = cli("run", small_binary.path, "--output-dir", out)
    assert r.returncode == 1 and "symbolic link" in r.stderr, r.stderr
    assert victim.read_text() == "precious"
    assert (out / "output_0_0.raw").is_symlink()  # left as it was, never followed nor replaced


def test_symlink_at_report_path_is_refused_before_load_and_user_temp_kept(tmp_path, small_binary):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    report = tmp_path / "r.json"
    report.symlink_to(victim)
    (tmp_path / "r.tmp").write_text("mine")
    (tmp_path / "r.json.tmp").write_text("mine too")
    r = cli("run", CORRUPT_PTE, "--report", report)  # a load would crash
    assert r.returncode == 1 and "symbolic link" in r.stderr and "crashed" not in r.stderr, r.stderr
    assert victim.read_text() == "precious"
    assert (tmp_path / "r.tmp").read_text() == "mine"
    assert (tmp_path / "r.json.tmp").read_text() == "mine too"


@pytest.mark.slow
def test_report_written_next_to_a_users_temp_files_keeps_them(tmp_path, small_binary):
    (tmp_path / "r.tmp").write_text("mine")
    r = cli("run", small_binary.path, "--report", tmp_path / "r.json")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "r.tmp").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.tmp"]


@pytest.mark.slow
def test_full_disk_stops_the_run_at_the_first_failed_write(small_fs, small_binary):
    """Each 256-byte output takes a 4 KiB tmpfs page: the up-front estimate (payload bytes) passes,
    the disk fills after a few dozen iterations; the run stops there, naming the file."""
    (small_fs / "filler").write_bytes(b"\0" * (512 - 160) * 1024)
    out = small_fs / "out"
    r = cli("run", small_binary.path, "--iteration", "300", "--output-dir", out)
    assert r.returncode == 1, r.stderr
    assert "No space left on device" in r.stderr and "output_" in r.stderr, r.stderr
    files = sorted(out.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert 0 < len(files) < 300
    assert all(p.stat().st_size == 256 for p in files), "a zero-byte or partial file was left"
    assert not [p for p in files if p.name.endswith(".tmp")]
    names = {p.name for p in files}
    assert names == {f"output_{i}_0.raw" for i in range(len(files))}, "it went on after the failure"
    failed = f"output_{len(files)}_0.raw"
    assert failed in r.stderr and f"outputs of {len(files)} earlier iteration(s)" in r.stderr


def test_outputs_that_cannot_fit_are_refused_before_the_first_iteration(small_fs, small_binary):
    out = small_fs / "out"
    r = cli("run", small_binary.path, "--iteration", "100000", "--output-dir", out)
    assert r.returncode == 1 and "needed" in r.stderr, r.stderr
    assert list(out.iterdir()) == []


def test_enospc_in_write_atomic_leaves_nothing(tmp_path, monkeypatch):
    """os.write failing with ENOSPC half-way: an error with path and bytes written, no temp file,
    the previous file at the target untouched."""
    target = tmp_path / "r.json"
    target.write_text("old")
    real = os.write
    calls = []

    def write(fd: int, data) -> int:
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, bytes(data)[:1000])

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(QnnrtError, match=r"No space left on device after 1000 B"):
        fileio.write_atomic(target, "x" * 5000, "report")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_stop_inside_the_temp_files_creation_leaves_nothing(tmp_path, monkeypatch):
    """A stop signal (KeyboardInterrupt in the worker) landing after mkstemp made the file but
    before its name came back: the temp file is found by its name and removed (a stopped run left
    `.output_2_0.raw.qnnrt<pid>.<random>.tmp` behind before)."""
    import tempfile
    target = tmp_path / "output_0.raw"
    other = tmp_path / f".other.raw.{fileio.TEMP_TAG}{os.getpid()}.keep.tmp"     # another path's: kept
    other.write_text("x")
    real = tempfile.mkstemp

    def mkstemp(**kw):
        fd, _name = real(**kw)
        os.close(fd)
        raise KeyboardInterrupt
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    with pytest.raises(KeyboardInterrupt):
        fileio.write_atomic(target, b"abc")
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name]


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--report", "--profile-path", "--heap-profiling-path", "--output-dir"])
def test_read_only_targets_fail_before_load(read_only_dir, flag):
    target = read_only_dir / ("out" if flag == "--output-dir" else "f.json")
    extra = ["--profile-level", "basic"] if flag == "--profile-path" else []
    r = cli("run", CORRUPT_PTE, flag, target, *extra)  # loading would crash
    assert r.returncode == 1, r.stderr
    assert "crashed" not in r.stderr and str(read_only_dir) in r.stderr, r.stderr
    assert "Read-only file system" in r.stderr or "not writable" in r.stderr, r.stderr


def test_write_array_raw_and_npy_round_trip(tmp_path):
    a = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    fileio.write_array(tmp_path / "a.npy", a.T)  # non-contiguous input
    fileio.write_array(tmp_path / "a.raw", a)
    assert np.array_equal(np.load(tmp_path / "a.npy"), a.T)
    assert np.array_equal(np.fromfile(tmp_path / "a.raw", np.int16).reshape(a.shape), a)
    (tmp_path / "link.npy").symlink_to(tmp_path / "a.raw")
    with pytest.raises(QnnrtError, match="symbolic link"):
        fileio.write_array(tmp_path / "link.npy", a)


def test_epcontext_node_outside_the_manifest_is_refused(tmp_path, two_method_program):
    prog = tmp_path / "prog"
    shutil.copytree(two_method_program, prog)
    shutil.copyfile(prog / "contexts" / "shared.bin", prog / "contexts" / "extra.bin")
    graph = qnnrt.load(two_method_program).__enter__()
    try:
        g = graph.method("first").graph_calls[0]
        gname = getattr(g, "graph", None) or getattr(g, "graph_name", None)
    finally:
        graph.close()
    import json
    manifest = json.loads((prog / "program.json").read_text())
    gname = gname if isinstance(gname, str) else manifest["contexts"][0]["graphs"][0]
    save_model([epcontext_node(gname, "contexts/extra.bin", ["x"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
               prog / "first.onnx")
    with pytest.raises(FormatError, match="does not list"):
        qnnrt.load(prog)
    r = cli("run", prog, "--method", "first")
    assert r.returncode == 1 and "does not list" in r.stderr, r.stderr


def test_16_gib_input_shape_is_refused_before_allocation(tmp_path, monkeypatch, small_binary):
    monkeypatch.delenv(io_files.MAX_INPUT_ENV, raising=False)
    io_files.set_max_input_bytes(None)
    spec = IOSpec("x", (4, 1024, 1024, 1024), np.dtype(np.float32))
    with pytest.raises(InputError, match=r"16.00 GiB.*refused before allocating"):
        io_files.random_inputs([spec])
    # a .npy whose header claims 16 GiB: refused from the header, the data is never read
    fake = tmp_path / "x.npy"
    with open(fake, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (4, 1024, 1024, 1024)})
    with pytest.raises(InputError, match="16.00 GiB"):
        io_files.read_array(fake, spec)
    # the limit is configurable: the CLI flag and the environment
    r = cli("run", small_binary.path, "--max-input-bytes", "100")
    assert r.returncode == 1 and "over the input limit of 100 B" in r.stderr, r.stderr
    monkeypatch.setenv(io_files.MAX_INPUT_ENV, "1GiB")
    assert io_files.max_input_bytes() == 1 << 30


def test_spawned_worker_keeps_stdout_clean_and_crash_is_exit_1():
    r = cli("inspect", CORRUPT_PTE)
    assert r.returncode == 1 and "QNN library crashed (SIGSEGV)" in r.stderr
    assert sys.platform != "linux" or "worker pid" not in r.stderr


def test_temps_of_a_killed_worker_are_removed_and_nothing_else(tmp_path):
    """A worker killed mid-write leaves `.<name>.qnnrt<pid>.<random>.tmp`; the CLI removes exactly
    those of that pid (never a user's file, never another process's temp, never through a link)."""
    from qnnrt.fileio import remove_temps_of
    ours = tmp_path / ".output_1_0.raw.qnnrt4242.ab12cd.tmp"
    other_pid = tmp_path / ".output_1_0.raw.qnnrt4343.ab12cd.tmp"
    users = [tmp_path / ".mine.tmp", tmp_path / "r.tmp", tmp_path / ".x.qnnrt4242.notatemp"]
    for p in [ours, other_pid, *users]:
        p.write_text("x")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (tmp_path / ".link.qnnrt4242.zz.tmp").symlink_to(victim)
    assert remove_temps_of(4242, [tmp_path]) == [str(ours)]
    assert other_pid.exists() and all(p.exists() for p in users) and victim.read_text() == "keep"
