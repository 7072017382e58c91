"""Backend: owns the QNN log, backend and device handles, and every context created on it."""
from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes as C
import itertools
import logging
import queue
import threading
import weakref
from typing import TYPE_CHECKING, Protocol

from qnnrt._capi import codes
from qnnrt._capi import types as T
from qnnrt._capi.library import QnnLibrary, open_library
from qnnrt._capi.log import make_log_callback, raise_pending
from qnnrt.core.freeing import check_free
from qnnrt.errors import QnnError, QnnrtError, remedy_for
from qnnrt.soc import htp_arch_of, parse_soc

if TYPE_CHECKING:
    from qnnrt.core.context import Context


class Closeable(Protocol):
    """What a backend owns: a context or a profile."""
    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...

qnn_logger = logging.getLogger("qnnrt.qnn")


def _python_level(level: int) -> int:
    """The `logging` level of a QNN log line (an unknown QNN level: DEBUG)."""
    try:
        return T.LogLevel(level).python_level
    except ValueError:
        return logging.DEBUG


class LogBook:
    """Receives QNN log lines: forwards them to `logging` and keeps the recent ones, numbered, so a
    failed call can attach the lines it caused."""

    def __init__(self, keep: int = 512):
        self._lines: collections.deque[tuple[int, int, str]] = collections.deque(maxlen=keep)
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self.listeners: list = []

    def __call__(self, level: int, text: str) -> None:
        with self._lock:
            self._lines.append((next(self._seq), level, text))
        qnn_logger.log(_python_level(level), "%s", text)
        for fn in list(self.listeners):
            fn(level, text)

    def mark(self) -> int:
        """A sequence number; lines after it were logged after this call."""
        with self._lock:
            return self._lines[-1][0] if self._lines else 0

    def since(self, mark: int, max_level: int = 5) -> list[str]:
        with self._lock:
            return [t for s, lvl, t in self._lines if s > mark and lvl <= max_level]

    def tail(self, n: int = 12, max_level: int = 2) -> list[str]:
        with self._lock:
            return [t for _, lvl, t in self._lines if lvl <= max_level][-n:]


_live_backends: weakref.WeakSet[Backend] = weakref.WeakSet()


def live_contexts_in_process() -> list[Context]:
    """Every live context of every backend in this process: they share the process's PD."""
    return [c for be in list(_live_backends) for c in be.live_contexts()]


def backend_build_id(lib: QnnLibrary) -> str:
    """The backend library's build id (QnnBackend_getBuildId; needs no backend handle), or ''."""
    s = C.c_char_p()
    try:
        if lib.api.has("backendGetBuildId") and lib.api.backendGetBuildId(C.byref(s)) == 0:
            return (s.value or b"").decode(errors="replace")
    except Exception:  # noqa: BLE001 - an identity detail: never fail because of it
        pass
    return ""


class _Reaper:
    """Frees backends dropped without close(), on a thread of its own. A finalizer runs wherever the
    garbage collector does, and that can be inside a QNN call on this very thread (a log callback
    that allocates starts it): a QNN free made there re-enters QNN and deadlocks it. Started with the
    first backend, never from a finalizer (starting a thread takes locks)."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Backend] = queue.SimpleQueue()   # put() is safe in a finalizer
        self.started = False
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if not self.started:
                threading.Thread(target=self._loop, name="qnnrt-backend-reaper", daemon=True).start()
                self.started = True

    def _loop(self) -> None:
        while True:
            self.close_one(self.queue.get())

    @staticmethod
    def close_one(be: Backend) -> None:
        try:
            be.close()
        except Exception:  # noqa: BLE001 - a reaped backend's failure has nobody to go to
            pass

    def drain(self) -> None:
        while not self.queue.empty():
            self.close_one(self.queue.get_nowait())


_reaper = _Reaper()


@atexit.register
def _close_all_at_exit() -> None:
    _reaper.drain()
    for be in list(_live_backends):
        be.close()


class Backend:
    """The HTP backend with its log and device. Contexts created on it are freed before it is.

    `soc` selects the SoC (model number or name) through the HTP device custom config; `htp_arch`
    sets the arch (older style). `log_level` is QNN's: error, warn, info, verbose, debug.
    `signed_pd` runs the session in a signed protection domain (HTP device config option 2, what
    ExecuTorch does for a compile spec with pd_session = signed). `device_id` opens another HTP
    device than the first, on boards with several (the arch config carries it, as in ONNX Runtime's
    QNN EP; the arch comes from `htp_arch` or the SoC).
    """

    def __init__(self, backend_lib: str | None = None, soc: str | int | None = None,
                 htp_arch: int | None = None, log_level: T.LogLevel | str = "warn", device: bool = True,
                 signed_pd: bool = False, device_id: int = 0):
        self.lib: QnnLibrary = open_library(backend_lib)
        self.api = self.lib.api
        self.log = LogBook()
        self._closed = False
        self._lock = threading.RLock()
        # strong references: a context dropped without close() is still freed by its backend (GC
        # clears weak references before finalizers run, which would leak its PD reservation)
        self._children: list = []
        self._contexts: weakref.WeakSet[Context] = weakref.WeakSet()   # the children that are contexts
        self._log_cb = make_log_callback(self.log)
        self.log_handle = C.c_void_p()
        self.handle = C.c_void_p()
        self.device = C.c_void_p()
        self.soc_model = parse_soc(soc)
        self.htp_arch = htp_arch
        self.signed_pd = signed_pd
        self.device_id = int(device_id)
        if self.device_id and self.htp_arch is None:
            self.htp_arch = htp_arch_of(self.soc_model)
            if self.htp_arch is None:
                raise QnnrtError(f"opening HTP device {device_id} needs the HTP arch (QNN selects a "
                                 f"device in its arch config): give htp_arch or a SoC qnnrt knows")
        self._log_level: int = T.LogLevel.parse(log_level)
        with contextlib.ExitStack() as undo:
            undo.callback(self.close)
            self.check(self.api.logCreate(self._log_cb, self._log_level, C.byref(self.log_handle)),
                       "logCreate")
            self.check(self.api.backendCreate(self.log_handle, None, C.byref(self.handle)),
                       "backendCreate")
            if device:
                self._create_device()
            undo.pop_all()
        _live_backends.add(self)
        _reaper.start()

    # -- errors ----------------------------------------------------------------------------
    def check(self, rc: int, function: str, mark: int | None = None, context: str = "") -> None:
        """Raise QnnError for a non-zero error handle, with the log lines the call produced.

        First, an interrupt (Ctrl-C, SIGTERM) that arrived while QNN was calling the log callback is
        raised here, after the QNN call returned: it is never swallowed by the callback."""
        raise_pending()
        if rc == 0:
            return
        code = codes.code_of(rc)
        lines = self.log.since(mark, max_level=2) if mark is not None else self.log.tail()
        lines = lines[-12:]
        raise QnnError(function, code, codes.error_name(code), self.lib.error_message(rc),
                       lines, remedy_for(code, lines), context)

    # -- device ----------------------------------------------------------------------------
    def device_config_type(self) -> type[T.HtpDeviceCustomConfigV1] | type[T.HtpDeviceCustomConfigV2]:
        """The HTP device custom config layout for this library's HTP API version."""
        major, minor, _ = self.lib.backend_api
        if major != 5:
            raise QnnrtError(f"unknown HTP API major {major}: cannot lay out device config")
        return T.HtpDeviceCustomConfigV1 if minor <= 43 else T.HtpDeviceCustomConfigV2

    def _create_device(self) -> None:
        custom = []
        cfg_type = self.device_config_type()
        if self.soc_model is not None:
            c = cfg_type(option=T.HTP_DEVICE_OPTION_SOC)
            c.socModel = self.soc_model
            custom.append(c)
        if self.htp_arch is not None:
            c = cfg_type(option=T.HTP_DEVICE_OPTION_ARCH)
            c.arch.deviceId = self.device_id
            c.arch.arch = int(self.htp_arch)
            custom.append(c)
        if self.signed_pd:
            c = cfg_type(option=T.HTP_DEVICE_OPTION_SIGNED_PD)
            c.signedPd.deviceId = self.device_id
            c.signedPd.useSignedProcessDomain = True
            custom.append(c)
        wrappers = []
        for c in custom:
            w = T.DeviceConfig(option=T.DEVICE_CONFIG_OPTION_CUSTOM)
            w.customConfig = C.addressof(c)
            wrappers.append(w)
        mark = self.log.mark()
        self.check(self.api.deviceCreate(self.log_handle, T.null_terminated(wrappers),
                                         C.byref(self.device)), "deviceCreate", mark,
                   f"(soc_model={self.soc_model}, htp_arch={self.htp_arch}"
                   f"{', signed PD' if self.signed_pd else ''}"
                   f"{f', device {self.device_id}' if self.device_id else ''})")

    # -- logging level ---------------------------------------------------------------------
    def set_log_level(self, level: int) -> None:
        if self.log_handle and self.api.has("logSetLogLevel"):
            self.api.logSetLogLevel(self.log_handle, int(level))

    @property
    def log_level(self) -> int:
        return self._log_level

    # -- contexts --------------------------------------------------------------------------
    def adopt(self, child: Closeable) -> None:
        """Take ownership of a context or profile made on this backend: freed before it, newest first."""
        with self._lock:
            if self._closed:
                raise QnnrtError("backend is closed")
            self._children = [c for c in self._children if not c.closed]
            self._children.append(child)

    def _live_children(self) -> list:
        with self._lock:
            return [c for c in self._children if not c.closed]

    def adopt_context(self, context: Context) -> None:
        """`adopt` for a context (what `live_contexts` lists)."""
        self.adopt(context)
        self._contexts.add(context)

    def live_contexts(self) -> list[Context]:
        return [c for c in self._live_children() if c in self._contexts]

    @property
    def closed(self) -> bool:
        return self._closed

    def restart(self) -> None:
        """Free every context and profile made on this backend (newest first), then the device and
        the backend handle, and create both again with the same log, SoC and arch: what a session
        needs after its DSP restarted and QNN could not recover it (QNN error 1011). The object, its
        function table and its log stay; contexts made before are closed (create them again)."""
        with self._lock:
            if self._closed:
                raise QnnrtError("backend is closed")
            for child in reversed(self._live_children()):
                try:
                    child.close()
                except Exception:  # noqa: BLE001 - keep freeing the rest
                    pass
            self._children = []
            had_device = bool(self.device)
            if self.device:
                self.api.deviceFree(self.device)
                self.device = C.c_void_p()
            if self.handle:
                self.api.backendFree(self.handle)
                self.handle = C.c_void_p()
            self.check(self.api.backendCreate(self.log_handle, None, C.byref(self.handle)),
                       "backendCreate")
            if had_device:
                self._create_device()

    def close(self) -> None:
        """Free live contexts and profiles (newest first), then device, backend, log. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for child in reversed(self._live_children()):  # contexts and profiles, newest first
                try:
                    child.close()
                except Exception:  # noqa: BLE001 - keep freeing the rest
                    pass
            if self.device:
                check_free(self.api.deviceFree(self.device), "deviceFree", "the device")
                self.device = C.c_void_p()
            if self.handle:
                check_free(self.api.backendFree(self.handle), "backendFree", "the backend")
                self.handle = C.c_void_p()
            if self.log_handle:
                check_free(self.api.logFree(self.log_handle), "logFree", "the log")
                self.log_handle = C.c_void_p()
            _live_backends.discard(self)

    def __del__(self) -> None:
        # dropped without close(): free the QNN handles anyway, or the PD they hold is lost to the
        # process (QNN keeps it reserved until its handles are freed); on the reaper's thread, never
        # here (this may be inside a QNN call: _Reaper)
        if not getattr(self, "_closed", True):
            _reaper.queue.put(self)

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Backend({self.lib.provider_name} core {'.'.join(map(str, self.lib.core_api))}, "
                f"HTP {'.'.join(map(str, self.lib.backend_api))}, soc={self.soc_model}, "
                f"{'closed' if self._closed else 'open'})")
