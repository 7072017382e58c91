"""Building this repository's libQnnHtp.so shims: tests/data/qnn_fault_shim.c, tests/data/qnn_mem_shim.c
and bench/anchor/qnn_shim.c (the ExecuTorch comparison kit's). Each is one C file on the forwarding
core bench/anchor/qnn_forward.h, built as `libQnnHtp.so` in a folder beside links to the real
library's other files (the system library and the simulator's libraries are found there), so
`--backend-lib FOLDER` or `backend_lib=FOLDER` uses it.

Every build passes qnnrt's own idea of the QNN interface table (its size and the index of each entry
the shim replaces): the core checks them against its definition at compile time."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "bench" / "anchor"          # qnn_forward.h
BACKEND_LIB = "libQnnHtp.so"


def compiler(what: str) -> str:
    """$CC, gcc, cc or clang; the test skips without one."""
    cc = next((c for c in (os.environ.get("CC"), "gcc", "cc", "clang") if c and shutil.which(c)), None)
    if cc is None:
        import pytest
        pytest.skip(f"no C compiler (gcc, cc or clang) on PATH to build {what}")
    return cc


def interface_defines(**slots: str) -> list[str]:
    """-DIFACE_BYTES and -D<KEY>=<index of entry NAME> for each KEY=NAME, from qnnrt's declaration."""
    import ctypes as C

    from qnnrt._capi.functions import INTERFACE_SLOTS, InterfaceProvider
    out = [f"-DIFACE_BYTES={C.sizeof(InterfaceProvider)}"]
    out += [f"-D{key}={INTERFACE_SLOTS.index(name)}" for key, name in slots.items()]
    return out


def link_siblings(real: Path, folder: Path) -> None:
    """Links in `folder` to every file beside the real library but the library itself."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in real.parent.iterdir():
        if f.name != BACKEND_LIB and not (folder / f.name).exists():
            (folder / f.name).symlink_to(f)


def compile_library(cc: str, source: Path, out: Path, flags: list[str], libs: list[str], what: str) -> None:
    """cc -shared -fPIC, with the core's folder on the include path; raises with the compiler's
    message when it fails."""
    cmd = [cc, "-shared", "-fPIC", "-O1", f"-I{CORE}", *flags, "-o", str(out), str(source),
           *libs]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"building {what} failed: {' '.join(cmd)}\n{r.stderr}")
