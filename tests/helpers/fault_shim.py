"""A fault injector for recovery tests: tests/data/qnn_fault_shim.c built into a libQnnHtp.so that
forwards every call to the real library (onnxruntime-qnn's) and fails chosen graphExecute calls.

The library sits in a folder beside links to every other file of the real library's folder (the
system library and the simulator's libraries are found there), so `--backend-lib FOLDER` or
`backend_lib=FOLDER` uses it. Which calls fail: `QNNRT_FAULT_EXEC` ("3", "3,7", "3-", optionally
":CODE"; counted per process from 1), read at each call."""
from __future__ import annotations

import ctypes as C
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.data import SHIMS
from tests.helpers.shim_build import (BACKEND_LIB, compile_library, compiler, interface_defines,
                                      link_siblings)

SOURCE = SHIMS / "qnn_fault_shim.c"


@dataclass
class FaultShim:
    folder: Path        # give this as --backend-lib / backend_lib
    real: Path          # the real libQnnHtp.so it forwards to

    def env(self, fail: str | None = None) -> dict[str, str]:
        """Environment for a process that loads the shim; `fail` is QNNRT_FAULT_EXEC."""
        env = dict(os.environ, QNNRT_FAULT_REAL=str(self.real))
        env.pop("QNNRT_FAULT_EXEC", None)
        if fail:
            env["QNNRT_FAULT_EXEC"] = fail
        return env

    def counter(self) -> C.CDLL:
        """This process's copy of the shim (the one qnnrt loaded: same path, same handle)."""
        lib = C.CDLL(str(self.folder / BACKEND_LIB), mode=C.RTLD_LOCAL)
        lib.qnnrt_fault_calls.restype = C.c_ulong
        return lib


def build_fault_shim(out: Path) -> FaultShim:
    """Compile the shim into `out` and link the real library folder's other files beside it."""
    from qnnrt._capi.library import find_library
    cc = compiler("the fault-injection shim")
    real = find_library(BACKEND_LIB)
    link_siblings(real, out)
    compile_library(cc, SOURCE, out / BACKEND_LIB, interface_defines(EXEC_SLOT="graphExecute"), ["-ldl"],
                    "the fault shim")
    return FaultShim(out, real)


@pytest.fixture(scope="session")
def fault_shim(tmp_path_factory) -> FaultShim:
    return build_fault_shim(tmp_path_factory.mktemp("fault_shim"))
