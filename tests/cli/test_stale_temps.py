"""Temp files and folders of a process that died without cleaning up (SIGKILL, the OOM killer) are
removed at the next start (fileio.owned_prefix / remove_stale_temps, issue 47); a live process's,
and names without a pid, are kept."""
from __future__ import annotations

import os
import subprocess
import sys

from qnnrt.fileio import owned_prefix, remove_stale_temps


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_leftovers_of_a_dead_process_go_and_others_stay(tmp_path):
    dead = _dead_pid()
    (tmp_path / f"qnnrt-steps-{dead}-abc").write_text("x")
    (tmp_path / f"qnnrt-build-{dead}-xyz").mkdir()
    (tmp_path / f"qnnrt-build-{dead}-xyz" / "model.onnx").write_text("x")
    mine = tmp_path / (owned_prefix("qnnrt-steps-") + "abc")
    mine.write_text("x")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / f"qnnrt-steps-{live.pid}-abc").write_text("x")
        (tmp_path / "qnnrt-steps-abc").write_text("x")                  # an old name: no pid, kept
        target = tmp_path / "victim"
        target.write_text("keep")
        os.symlink(target, tmp_path / f"qnnrt-steps-{dead}-link")
        removed = remove_stale_temps(tmp_path, "qnnrt-steps-") + remove_stale_temps(tmp_path, "qnnrt-build-")
    finally:
        live.kill()
        live.wait()
    assert sorted(os.path.basename(p) for p in removed) == sorted(
        [f"qnnrt-steps-{dead}-abc", f"qnnrt-build-{dead}-xyz", f"qnnrt-steps-{dead}-link"])
    assert mine.exists() and (tmp_path / f"qnnrt-steps-{live.pid}-abc").exists()
    assert (tmp_path / "qnnrt-steps-abc").exists() and target.read_text() == "keep"
