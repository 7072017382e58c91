"""Finding and loading the QNN shared libraries, and resolving their provider function tables.

Search order: an explicit path, `QNN_SDK_ROOT/lib/<target>/`, then the `onnxruntime_qnn` package.
Libraries are loaded by absolute path with RTLD_LOCAL: RTLD_GLOBAL on libQnnHtp.so makes a later
`import onnxruntime` crash.
"""
from __future__ import annotations

import contextlib
import ctypes as C
import glob
import os
import platform
import threading
from dataclasses import dataclass, field
from pathlib import Path

from qnnrt._capi import codes
from qnnrt._capi.functions import (INTERFACE_SIGNATURES, INTERFACE_SLOTS, SYSTEM_SIGNATURES,
                                   SYSTEM_SLOTS, InterfaceProvider, SystemInterfaceProvider)
from qnnrt._capi.types import ErrorHandle, P, u32
from qnnrt.errors import LibraryNotFoundError, QnnrtError

BACKEND_LIB = "libQnnHtp.so"
SYSTEM_LIB = "libQnnSystem.so"
SUPPORTED_CORE_API_MAJOR = 2
SUPPORTED_SYSTEM_API_MAJOR = 1
SUPPORTED_HTP_API_MAJOR = 5


def sdk_targets() -> list[str]:
    """`lib/<target>` folder names of a QNN SDK that fit this machine, best first."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return ["x86_64-linux-clang"]
    if machine in ("aarch64", "arm64"):
        if "ANDROID_ROOT" in os.environ or os.path.exists("/system/build.prop"):
            return ["aarch64-android"]
        return ["aarch64-oe-linux-gcc11.2", "aarch64-oe-linux-gcc9.3", "aarch64-oe-linux-gcc8.2",
                "aarch64-ubuntu-gcc9.4", "aarch64-android"]
    return []


def candidate_dirs() -> list[tuple[str, Path]]:
    """Where libraries are looked for when no path is given, in order, each with its reason."""
    out: list[tuple[str, Path]] = []
    root = os.environ.get("QNN_SDK_ROOT")
    if root:
        for t in sdk_targets():
            out.append((f"QNN_SDK_ROOT ({t})", Path(root) / "lib" / t))
        if platform.machine().lower() in ("aarch64", "arm64"):  # other OE Linux gcc versions
            for d in sorted(glob.glob(os.path.join(root, "lib", "aarch64-oe-linux-gcc*"))):
                if all(Path(d) != p for _, p in out):
                    out.append(("QNN_SDK_ROOT", Path(d)))
    try:
        import importlib.util
        spec = importlib.util.find_spec("onnxruntime_qnn")
        if spec and spec.origin:
            out.append(("onnxruntime_qnn package", Path(spec.origin).parent))
    except (ImportError, ValueError):
        pass
    return out


def find_library(name: str, explicit: str | os.PathLike | None = None) -> Path:
    """Absolute path of library `name`. An explicit path (a file, or a folder holding `name`) is
    the only place looked at when given: a wrong explicit path is an error, never a fallback."""
    if explicit:
        p = Path(explicit)
        if p.is_file() and (name == BACKEND_LIB or p.name == name):
            return p.resolve()
        folder = p if p.is_dir() else p.parent
        if (folder / name).is_file():
            return (folder / name).resolve()
        raise LibraryNotFoundError(
            f"cannot find {name} at the explicit path {p} (looked for {p if p.suffix else folder / name}). "
            f"What to do: pass the path of libQnnHtp.so (with libQnnSystem.so beside it), or "
            f"leave --backend-lib out to use QNN_SDK_ROOT or the onnxruntime-qnn package.")
    looked = []
    for why, d in candidate_dirs():
        q = d / name
        looked.append(f"{q} ({why})")
        if q.is_file():
            return q.resolve()
    raise LibraryNotFoundError(
        f"cannot find {name}. Looked in:\n" + "\n".join("  " + x for x in looked or
                                                       ["(nowhere: QNN_SDK_ROOT is not set and "
                                                        "onnxruntime_qnn is not installed)"])
        + "\nWhat to do: `pip install onnxruntime-qnn` (ships the x86_64 QNN libraries), set "
          "QNN_SDK_ROOT to a QNN SDK, or pass --backend-lib /path/to/libQnnHtp.so.")


@contextlib.contextmanager
def _stdout_silenced():
    """The QNN libraries print a banner to stdout when loaded; keep our stdout clean (--json)."""
    import sys
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


_dll_cache: dict[Path, C.CDLL] = {}
_dll_lock = threading.Lock()


def load_dll(path: Path) -> C.CDLL:
    with _dll_lock:
        dll = _dll_cache.get(path)
        if dll is None:
            try:
                with _stdout_silenced():
                    dll = C.CDLL(str(path), mode=C.RTLD_LOCAL)
            except OSError as e:
                raise LibraryNotFoundError(f"cannot load {path}: {e}") from e
            _dll_cache[path] = dll
        return dll


class FunctionTable:
    """Callables for the slots of one provider table; each call returns the raw error handle."""

    def __init__(self, slots: list[str], pointers, signatures: dict[str, tuple], what: str):
        self._fns = {}
        for name, argtypes in signatures.items():
            addr = pointers[slots.index(name)]
            if addr:
                # CFUNCTYPE (not PYFUNCTYPE): the GIL is released during the call
                self._fns[name] = C.CFUNCTYPE(ErrorHandle, *argtypes)(addr)
        self._what = what

    def __getattr__(self, name: str):
        try:
            return self._fns[name]
        except KeyError:
            raise QnnrtError(f"{self._what} does not provide {name} (the function pointer is NULL "
                             f"or not called by qnnrt)") from None

    def has(self, name: str) -> bool:
        return name in self._fns


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
    api: FunctionTable = field(repr=False)
    sys: FunctionTable = field(repr=False)

    def error_message(self, handle: int) -> str:
        from ctypes import byref, c_char_p
        s = c_char_p()
        try:
            if self.api.has("errorGetMessage") and self.api.errorGetMessage(handle, byref(s)) == 0:
                return (s.value or b"").decode(errors="replace")
        except Exception:  # the message is a courtesy; never fail because of it
            pass
        return ""

    def error_name(self, handle: int) -> str:
        return codes.error_name(codes.code_of(handle))


_libraries: dict[tuple[Path, Path], QnnLibrary] = {}


def _providers(dll: C.CDLL, symbol: str, struct, path: Path) -> list:
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
        api=FunctionTable(INTERFACE_SLOTS, prov.functions, INTERFACE_SIGNATURES, str(bpath)),
        sys=FunctionTable(SYSTEM_SLOTS, sprov.functions, SYSTEM_SIGNATURES, str(spath)))
    _libraries[key] = lib
    return lib
