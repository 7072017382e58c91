"""libcdsprpc's rpcmem allocator: memory the CPU and the DSP share (no copies between them).

rpcmem_alloc(heap id, flags, size) -> pointer, rpcmem_to_fd(pointer) -> file descriptor (what
QNN's memRegister takes for QNN_MEM_TYPE_ION), rpcmem_free(pointer). The library ships with the
device's DSP user space; where it is looked for is `platforms.cdsprpc_candidates` (an x86 machine
has none, which is how `load()` says the simulator offers no shared buffers; the tests point
QNNRT_CDSPRPC_LIB at an emulation). Heap id 25 (system heap) and flags 1 (default, cached) are the
values ExecuTorch's SharedBuffer.cpp passes.
"""
from __future__ import annotations

import ctypes as C
from dataclasses import dataclass
from typing import Any

from qnnrt._capi import platforms

HEAP_ID_SYSTEM = 25
DEFAULT_FLAGS = 1


@dataclass(frozen=True)
class Rpcmem:
    """The three rpcmem entry points of a loaded libcdsprpc."""
    path: str
    alloc: Any
    free: Any
    to_fd: Any


# what load() found, per list of candidates (the environment may name another library)
_tried: dict[tuple[tuple[str, str], ...], tuple[Rpcmem | None, str]] = {}


def load() -> tuple[Rpcmem | None, str]:
    """(the rpcmem functions, '') or (None, why not); tried once per process and candidate list."""
    candidates = tuple(platforms.cdsprpc_candidates(platforms.detect_host()))
    found = _tried.get(candidates)
    if found is None:
        found = _tried[candidates] = _open(candidates)
    return found


def _open(candidates: tuple[tuple[str, str], ...]) -> tuple[Rpcmem | None, str]:
    errors = []
    for name, why in candidates:
        try:
            dll = C.CDLL(name, mode=getattr(C, "RTLD_LOCAL", 0))
        except OSError as e:
            errors.append(f"{name} ({why}): {e}")
            continue
        try:
            alloc, free, to_fd = dll.rpcmem_alloc, dll.rpcmem_free, dll.rpcmem_to_fd
        except AttributeError as e:
            errors.append(f"{name} ({why}): {e}")
            continue
        alloc.restype, alloc.argtypes = C.c_void_p, [C.c_int, C.c_uint32, C.c_int]
        free.restype, free.argtypes = None, [C.c_void_p]
        to_fd.restype, to_fd.argtypes = C.c_int, [C.c_void_p]
        return Rpcmem(name, alloc, free, to_fd), ""
    return None, ("no libcdsprpc on this machine (the DSP's RPC library; devices have it, the x86 "
                  "simulator does not): " + "; ".join(errors))
