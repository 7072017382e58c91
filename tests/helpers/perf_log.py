"""The ExecuTorch comparison kit's perf log (bench/anchor/qnn_shim.c, QNN_SHIM_PERF_LOG): build the shim,
and compare two runs' perf-infrastructure calls payload for payload, apart from the power config id
(random per process)."""
from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.shim_build import (BACKEND_LIB, ROOT, compile_library, compiler, interface_defines,
                                      link_siblings)

SHIM_SOURCE = ROOT / "bench" / "anchor" / "qnn_shim.c"
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


def build_shim(folder: Path, real_lib: Path) -> Path:
    """The kit's shim as `folder`/libQnnHtp.so beside links to the real library's siblings (what qnnrt
    expects of a backend folder); it forwards to QNN_SHIM_REAL. Skips the test without a C compiler."""
    cc = compiler("the ExecuTorch kit's shim (bench/anchor/qnn_shim.c)")
    link_siblings(real_lib, folder)
    out = folder / BACKEND_LIB
    flags = ["-O2", "-Wl,-z,nodelete", *interface_defines(
        EXEC_SLOT="graphExecute", CONTEXT_FREE_SLOT="contextFree", REGISTER_SLOT="memRegister",
        DEVICE_CREATE_SLOT="deviceCreate", INFRASTRUCTURE_SLOT="deviceGetInfrastructure",
        CONTEXT_FROM_BINARY_SLOT="contextCreateFromBinary")]
    compile_library(cc, SHIM_SOURCE, out, flags, ["-ldl"], "the kit's shim")
    return out
