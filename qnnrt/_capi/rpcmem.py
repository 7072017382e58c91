"""libcdsprpc's rpcmem allocator: memory the CPU and the DSP share (no copies between them).

rpcmem_alloc(heap id, flags, size) -> pointer, rpcmem_to_fd(pointer) -> file descriptor (what
QNN's memRegister takes for QNN_MEM_TYPE_ION), rpcmem_free(pointer). The library ships with the
device's DSP user space (Android: /vendor/lib64; Linux boards: /usr/lib; Windows on Snapdragon:
cdsprpc.dll); an x86 machine has none, which is how `available()` says the simulator offers no
shared buffers. Heap id 25 (system heap) and flags 1 (default, cached) are the values ExecuTorch's
SharedBuffer.cpp passes.
"""
from __future__ import annotations

import ctypes as C
import sys
from dataclasses import dataclass
from typing import Any

HEAP_ID_SYSTEM = 25
DEFAULT_FLAGS = 1
LIBRARY_NAMES = ("cdsprpc.dll", "libcdsprpc.dll") if sys.platform == "win32" else ("libcdsprpc.so",)


@dataclass(frozen=True)
class Rpcmem:
    """The three rpcmem entry points of a loaded libcdsprpc."""
    path: str
    alloc: Any
    free: Any
    to_fd: Any


_loaded: Rpcmem | None = None
_why_not: str = ""


def load() -> tuple[Rpcmem | None, str]:
    """(the rpcmem functions, '') or (None, why not); tried once per process."""
    global _loaded, _why_not
    if _loaded is not None or _why_not:
        return _loaded, _why_not
    errors = []
    for name in LIBRARY_NAMES:
        try:
            dll = C.CDLL(name, mode=getattr(C, "RTLD_LOCAL", 0))
        except OSError as e:
            errors.append(f"{name}: {e}")
            continue
        try:
            alloc, free, to_fd = dll.rpcmem_alloc, dll.rpcmem_free, dll.rpcmem_to_fd
        except AttributeError as e:
            errors.append(f"{name}: {e}")
            continue
        alloc.restype, alloc.argtypes = C.c_void_p, [C.c_int, C.c_uint32, C.c_int]
        free.restype, free.argtypes = None, [C.c_void_p]
        to_fd.restype, to_fd.argtypes = C.c_int, [C.c_void_p]
        _loaded = Rpcmem(name, alloc, free, to_fd)
        return _loaded, ""
    _why_not = ("no libcdsprpc on this machine (the DSP's RPC library; devices have it, the x86 "
                "simulator does not): " + "; ".join(errors))
    return None, _why_not
