"""The anchor kit's QNN_SHIM_PERF_LOG (qnnhtp_shim.c): parse it and compare two runs' perf-infrastructure
calls payload for payload, apart from the power config id (random per process)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

SHIM_SOURCE = Path(os.environ.get("QNNRT_SHIM_SOURCE",
                                  "/work/shared/tools/executorch-anchor/qnnhtp_shim.c"))
_ID = re.compile(r"id=(\d+)")


def normalized_calls(text: str) -> list[str]:
    """One entry per logged line, with the power config id replaced by <id> wherever it appears
    (the `id=` fields and the DCVS v3 payload's contextId, bytes 4..8)."""
    ids = {m.group(1) for m in _ID.finditer(text) if m.group(1) != "0"}
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        for i in ids:
            line = line.replace(f"id={i}", "id=<id>")
            line = line.replace(int(i).to_bytes(4, "little").hex(), "<id-bytes>")
        out.append(line)
    return out


def build_shim(folder: Path, real_lib: Path) -> Path | None:
    """The shim as `folder`/libQnnHtp.so beside links to the real library's siblings (what qnnrt
    expects of a backend folder); None when the source or a C compiler is missing."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if not SHIM_SOURCE.is_file() or cc is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    for f in real_lib.parent.iterdir():
        if f.name != "libQnnHtp.so" and f.suffix == ".so":
            (folder / f.name).symlink_to(f)
    if not (folder / "libQnnHtpPrepare.so").exists() and (real_lib.parent / "libHtpPrepare.so").exists():
        (folder / "libQnnHtpPrepare.so").symlink_to(real_lib.parent / "libHtpPrepare.so")
    out = folder / "libQnnHtp.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-Wl,-z,nodelete", "-o", str(out), str(SHIM_SOURCE),
                    "-ldl"], check=True, capture_output=True)
    return out
