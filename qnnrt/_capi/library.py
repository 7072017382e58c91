"""Finding and loading the QNN shared libraries, and resolving their provider function tables.

Search order: an explicit path, `QNN_SDK_ROOT/lib/<target>/`, then the `onnxruntime_qnn` package;
names and targets per OS come from `platforms` (pure functions, tested with folders in a temp dir).
Libraries are loaded by absolute path with RTLD_LOCAL: RTLD_GLOBAL on libQnnHtp.so makes a later
`import onnxruntime` crash.
"""
from __future__ import annotations

import contextlib
import ctypes as C
import logging
import os
import threading
from dataclasses import dataclass, field
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qnnrt._capi import codes, platforms
from qnnrt._capi.functions import (INTERFACE_SLOTS, SYSTEM_SLOTS, InterfaceProvider, QnnInterface,
                                   QnnSystemInterface, SystemInterfaceProvider)
from qnnrt._capi.types import ErrorHandle, P, u32
from qnnrt.errors import LibraryNotFoundError, QnnrtError

BACKEND_LIB, SYSTEM_LIB = platforms.library_names(platforms.detect_host())
SUPPORTED_CORE_API_MAJOR = 2
SUPPORTED_SYSTEM_API_MAJOR = 1
SUPPORTED_HTP_API_MAJOR = 5


def host() -> platforms.Host:
    """This process's host, read now (QNN_SDK_ROOT and ADSP_LIBRARY_PATH may change between calls)."""
    return platforms.detect_host()


def sdk_targets() -> list[str]:
    """`lib/<target>` folder names of a QNN SDK that fit this machine, best first."""
    h = host()
    return platforms.sdk_targets(h, h.env.get("QNN_SDK_ROOT"))


def candidate_dirs() -> list[tuple[str, Path]]:
    """Where libraries are looked for when no path is given, in order, each with its reason."""
    return platforms.candidate_dirs(host(), platforms.find_ort_qnn_package())


def find_library(name: str, explicit: str | os.PathLike | None = None) -> Path:
    """Absolute path of library `name`. An explicit path (a file, or a folder holding `name`) is
    the only place looked at when given: a wrong explicit path is an error, never a fallback."""
    h = host()
    found = platforms.find_library(h, name, explicit, platforms.find_ort_qnn_package())
    if found.path is None:
        raise LibraryNotFoundError(platforms.not_found_message(h, name, found))
    return found.path.resolve()


native_log = logging.getLogger("qnnrt.qnn")


def _flush_c_stdio() -> None:
    """Flush the C library's stdout buffer: QNN's loaders print through it, and a buffer left to the
    exit-time flush lands on the host program's stdout long after fd 1 was given back."""
    if os.name == "nt":
        return  # the QNN DLLs on Windows print through their own CRT's buffers, not reachable here
    with contextlib.suppress(OSError, AttributeError):
        C.CDLL(None).fflush(None)


@contextlib.contextmanager
def _stdout_captured() -> Iterator[None]:
    """What native code prints to fd 1 meanwhile (QNN's library banners at load) goes to the
    `qnnrt.qnn` log at DEBUG, never to the host program's stdout (a `--json` reader's, a user's
    `script.py > out.txt`)."""
    import sys
    import tempfile
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):
        yield
        return
    sink = tempfile.TemporaryFile()
    try:
        os.dup2(sink.fileno(), 1)
        yield
    finally:
        _flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)
        sink.seek(0)
        printed = sink.read(64 * 1024).decode("utf-8", "replace")
        sink.close()
        for line in printed.splitlines():
            if line.strip():
                native_log.debug("%s", line.strip())


_dll_cache: dict[Path, C.CDLL] = {}
_dll_lock = threading.Lock()


def load_dll(path: Path) -> C.CDLL:
    with _dll_lock:
        dll = _dll_cache.get(path)
        if dll is None:
            try:
                with _stdout_captured():
                    dll = C.CDLL(str(path), mode=C.RTLD_LOCAL)
            except OSError as e:
                raise LibraryNotFoundError(f"cannot load {path}: {e}") from e
            _dll_cache[path] = dll
        return dll


@dataclass
class QnnLibrary:
    """One loaded backend library + system library with their function tables and versions."""
    backend_path: Path
    system_path: Path
    provider_name: str
    backend_id: int
    core_api: tuple[int, int, int]
    backend_api: tuple[int, int, int]
    system_api: tuple[int, int, int]
    api: QnnInterface = field(repr=False)
    sys: QnnSystemInterface = field(repr=False)

    @property
    def is_simulator(self) -> bool:
        """The HTP simulator (x86_64 libraries), not a real NPU: decided by the hardware and the
        folder the backend library came from, not by this process's architecture (an x64 Python
        on Windows on Snapdragon loads the real NPU's arm64ec libraries)."""
        return not platforms.is_device_backend(host(), self.backend_path)

    def error_message(self, handle: int) -> str:
        from ctypes import byref, c_char_p
        s = c_char_p()
        try:
            if self.api.has("errorGetMessage") and self.api.errorGetMessage(handle, byref(s)) == 0:
                return (s.value or b"").decode(errors="replace")
        except Exception:  # noqa: BLE001 - the message is a courtesy; never fail because of it
            pass
        return ""

    def error_name(self, handle: int) -> str:
        return codes.error_name(codes.code_of(handle))


_libraries: dict[tuple[Path, Path], QnnLibrary] = {}


def _providers(dll: C.CDLL, symbol: str, struct: type[C.Structure], path: Path) -> list[Any]:
    """The provider structs a QNN library exports through `symbol` (getProviders)."""
    try:
        get = getattr(dll, symbol)
    except AttributeError:
        raise LibraryNotFoundError(f"{path} does not export {symbol}; is it a QNN library?") from None
    get.restype = ErrorHandle
    get.argtypes = [P(P(P(struct))), P(u32)]
    plist, n = P(P(struct))(), u32()
    rc = get(C.byref(plist), C.byref(n))
    if rc or n.value == 0:
        raise LibraryNotFoundError(f"{path}: {symbol} returned error {rc} with {n.value} "
                                   f"providers; is it a QNN library?")
    return [plist[i].contents for i in range(n.value)]


def open_library(backend_lib: str | os.PathLike | None = None) -> QnnLibrary:
    """Load (once per process) the HTP backend and system libraries and check their API versions."""
    bpath = find_library(BACKEND_LIB, backend_lib)
    spath = find_library(SYSTEM_LIB, bpath.parent)
    key = (bpath, spath)
    if key in _libraries:
        return _libraries[key]
    h = host()
    if platforms.is_device_backend(h, bpath):  # before the backend opens its DSP session
        platforms.setup_dsp_environment(h, bpath)
    bdll, sdll = load_dll(bpath), load_dll(spath)

    providers = _providers(bdll, "QnnInterface_getProviders", InterfaceProvider, bpath)
    prov = next((p for p in providers
                 if p.apiVersion.coreApiVersion.major == SUPPORTED_CORE_API_MAJOR), None)
    if prov is None:
        got = ", ".join(str(p.apiVersion.coreApiVersion) for p in providers)
        raise QnnrtError(f"{bpath} offers QNN core API {got}; qnnrt supports major version "
                         f"{SUPPORTED_CORE_API_MAJOR} only. Use a QNN SDK with core API 2.x.")
    if prov.apiVersion.backendApiVersion.major != SUPPORTED_HTP_API_MAJOR:
        raise QnnrtError(f"{bpath} reports backend API {prov.apiVersion.backendApiVersion}; qnnrt "
                         f"knows HTP backend API major {SUPPORTED_HTP_API_MAJOR} only (is this the "
                         f"HTP backend?).")
    sprov = next((p for p in _providers(sdll, "QnnSystemInterface_getProviders",
                                        SystemInterfaceProvider, spath)
                  if p.systemApiVersion.major == SUPPORTED_SYSTEM_API_MAJOR), None)
    if sprov is None:
        raise QnnrtError(f"{spath} offers no QNN system API {SUPPORTED_SYSTEM_API_MAJOR}.x provider.")

    lib = QnnLibrary(
        backend_path=bpath, system_path=spath,
        provider_name=(prov.providerName or b"").decode(), backend_id=prov.backendId,
        core_api=prov.apiVersion.coreApiVersion.as_tuple(),
        backend_api=prov.apiVersion.backendApiVersion.as_tuple(),
        system_api=sprov.systemApiVersion.as_tuple(),
        api=QnnInterface(INTERFACE_SLOTS, prov.functions, str(bpath)),
        sys=QnnSystemInterface(SYSTEM_SLOTS, sprov.functions, str(spath)))
    _libraries[key] = lib
    return lib
