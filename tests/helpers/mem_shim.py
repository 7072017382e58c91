"""Shared buffers emulated on the x86 simulator, which has none: tests/data/emulated_cdsprpc.c built
into a libcdsprpc.so (rpcmem over memfd host memory; qnnrt finds it through QNNRT_CDSPRPC_LIB) and
tests/data/qnn_mem_shim.c built into a libQnnHtp.so that forwards to the real one but implements
memRegister / memDeRegister and turns mem-handle tensors back into client buffers in graphExecute.

The shim sits in a folder beside links to every other file of the real library's folder, so
`backend_lib=FOLDER` uses it (as tests/helpers/fault_shim.py does). Its counters and the emulated
rpcmem's are read from this process's copies of the libraries (same path, same handle)."""
from __future__ import annotations

import ctypes as C
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.data import SHIMS
from tests.helpers.shim_build import (BACKEND_LIB, compile_library, compiler, interface_defines,
                                      link_siblings)

SHIM_COUNTERS = ("registered", "deregistered", "live", "executes_with_handles", "bound_tensors",
                 "freed_with_live", "registered_custom", "registered_at_offset")
RPCMEM_COUNTERS = ("allocs", "frees", "live")


@dataclass(frozen=True)
class MemShim:
    folder: Path        # backend_lib / --backend-lib
    cdsprpc: Path       # the emulated libcdsprpc.so (QNNRT_CDSPRPC_LIB)
    real: Path          # the real libQnnHtp.so the shim forwards to

    def env(self, refuse: bool = False, rpcmem: bool = True) -> dict[str, str]:
        """The variables a process using the emulation needs (refuse: memRegister refuses)."""
        out = {"QNNRT_MEM_SHIM_REAL": str(self.real)}
        if rpcmem:
            out["QNNRT_CDSPRPC_LIB"] = str(self.cdsprpc)
        if refuse:
            out["QNNRT_MEM_SHIM_REFUSE"] = "1"
        return out

    def counts(self) -> dict[str, int]:
        """The shim's counters (memRegister / memDeRegister, ...) and the rpcmem emulation's."""
        shim = C.CDLL(str(self.folder / BACKEND_LIB), mode=C.RTLD_LOCAL)
        rpc = C.CDLL(str(self.cdsprpc), mode=C.RTLD_LOCAL)
        out = {}
        for name in SHIM_COUNTERS:
            fn = getattr(shim, f"qnnrt_mem_{name}")
            fn.restype = C.c_long
            out[name] = fn()
        for name in RPCMEM_COUNTERS:
            fn = getattr(rpc, f"rpcmem_emul_{name}")
            fn.restype = C.c_long
            out[f"rpcmem_{name}"] = fn()
        return out


def build_mem_shim(out: Path) -> MemShim:
    """Compile the emulated libcdsprpc and the QNN shim into `out`."""
    from qnnrt._capi import types as T
    from qnnrt._capi.library import find_library
    cc = compiler("the shared-buffer emulation")
    real = find_library(BACKEND_LIB)
    qnn, rpc = out / "qnn", out / "cdsprpc"
    link_siblings(real, qnn)
    rpc.mkdir(parents=True, exist_ok=True)
    tensor = {"TENSOR_BYTES": C.sizeof(T.Tensor), "MEMTYPE_OFFSET": T.Tensor.u.offset + T.TensorV1.memType.offset,
              "DATA_OFFSET": T.Tensor.u.offset + T.TensorV1.d.offset}
    flags = [*interface_defines(EXEC_SLOT="graphExecute", RETRIEVE_SLOT="graphRetrieve",
                                CONTEXT_FREE_SLOT="contextFree", REGISTER_SLOT="memRegister",
                                DEREGISTER_SLOT="memDeRegister"),
             *[f"-D{k}={v}" for k, v in tensor.items()]]
    compile_library(cc, SHIMS / "qnn_mem_shim.c", qnn / BACKEND_LIB, flags, ["-ldl", "-lpthread"], "the QNN mem shim")
    compile_library(cc, SHIMS / "emulated_cdsprpc.c", rpc / "libcdsprpc.so", [], ["-lpthread"],
                    "the emulated libcdsprpc")
    return MemShim(qnn, rpc / "libcdsprpc.so", real)


@pytest.fixture(scope="session")
def mem_shim(tmp_path_factory) -> MemShim:
    return build_mem_shim(tmp_path_factory.mktemp("mem_shim"))
