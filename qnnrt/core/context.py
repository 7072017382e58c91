"""Context: one QNN context created from a context binary, and the graphs retrieved from it."""
from __future__ import annotations

import contextlib
import ctypes as C
import threading
import time
from typing import TYPE_CHECKING

from qnnrt._capi import codes
from qnnrt._capi import types as T
from qnnrt.core.backend import Backend
from qnnrt.core.binary import ContextBinary
from qnnrt.core.freeing import check_free
from qnnrt.core.graph import Graph
from qnnrt.core.profile import Profile
from qnnrt.core.spill_fill import CONFIG_NOT_SUPPORTED, SpillFillGroup
from qnnrt.errors import QnnrtError

if TYPE_CHECKING:
    from qnnrt.core.shared_buffer import Registration


def refuse_weight_sharing(binary: ContextBinary) -> None:
    """Raise before QNN sees a weight-shared binary on the simulator (its contextCreateFromBinary
    fails with 1000 or crashes on them)."""
    if binary.lib.is_simulator and binary.info.weight_sharing:
        shared = [f"{g.name} ({g.shared_weights_size} bytes)" for g in binary.graphs
                  if g.shared_weights_size]
        raise QnnrtError(
            f"{binary.where}: compiled with HTP weight sharing (shared weights in graph(s) "
            f"{', '.join(shared)}), which this backend (the x86 simulator) does not support; export "
            f"with the x86 settings (no weight sharing) or run on a device")


class Context:
    """Owns a QNN context handle. Graphs retrieved from it are invalidated when it is closed.

    No finalizer of its own: a live context is always reachable from its backend (`adopt_context`),
    which frees it, newest first, when it closes (explicitly, at exit, or when it is collected).

    `creation_log` keeps the log lines QNN wrote while creating it (at verbose level they include the
    context's PD size estimate). `dsp_memory_profiling` asks the HTP backend to profile DSP heap use
    (devices only; the simulator refuses it with error 1000).
    """

    def __init__(self, backend: Backend, binary: ContextBinary, profile: Profile | None = None,
                 dsp_memory_profiling: bool = False, name: str | None = None,
                 spill_fill_group: SpillFillGroup | None = None):
        self.backend = backend
        self.binary = binary
        self.name = name or binary.name
        self.handle = C.c_void_p()
        self._graphs: dict[str, Graph] = {}
        self._lock = threading.Lock()
        self._closed = True
        self._group: SpillFillGroup | None = None
        self._shared: list[Registration] = []   # shared buffers registered here: deregistered before it
        refuse_weight_sharing(binary)
        configs, keep = [], []
        if dsp_memory_profiling:
            htp = T.HtpContextCustomConfig(option=T.HTP_CONTEXT_OPTION_DSP_MEMORY_PROFILING)
            htp.boolValue = True
            wrap = T.ContextConfig(option=T.CONTEXT_CONFIG_OPTION_CUSTOM)
            wrap.customConfig = C.addressof(htp)
            keep += [htp, wrap]
            configs.append(wrap)
        group = spill_fill_group if spill_fill_group is not None and spill_fill_group.usable else None
        if group is not None:
            wrap, kept = group.config()
            keep += kept
            rc, mark = self._create(configs + [wrap], profile)
            if codes.code_of(rc) == CONFIG_NOT_SUPPORTED:   # the backend has no groups: plain context
                said = backend.log.since(mark, max_level=1)[:1]
                group.refuse(f"the backend refused REGISTER_MULTI_CONTEXTS (QNN error "
                             f"{CONFIG_NOT_SUPPORTED}{': ' + said[0].strip() if said else ''}); "
                             f"contexts are created without a spill-fill group")
                group = None
                rc, mark = self._create(configs, profile)
        else:
            rc, mark = self._create(configs, profile)
        backend.check(rc, "contextCreateFromBinary", mark, f"for {binary.where}")
        self._closed = False
        self._group = group
        if group is not None:
            group.joined(self)
        with contextlib.ExitStack() as undo:
            undo.callback(self.close)
            backend.adopt_context(self)
            undo.pop_all()

    def track_shared_buffer(self, buf: Registration) -> None:
        """A shared buffer registered with this context; closed (deregistered) before the context."""
        with self._lock:
            self._shared.append(buf)

    def _create(self, configs: list, profile: Profile | None) -> tuple[int, int]:
        """One contextCreateFromBinary with `configs`: (error handle, log mark before it)."""
        be, binary = self.backend, self.binary
        mark = be.log.mark()
        t0 = time.perf_counter()
        rc = be.api.contextCreateFromBinary(
            be.handle, be.device, T.null_terminated(configs), C.c_void_p(binary.address), binary.size,
            C.byref(self.handle), profile.handle if profile else None)
        self.create_seconds = time.perf_counter() - t0
        self.creation_log = be.log.since(mark)
        return rc, mark

    @property
    def closed(self) -> bool:
        return self._closed

    def graph(self, name: str) -> Graph:
        """The graph `name`, retrieved once and cached while the context lives."""
        with self._lock:
            if self._closed:
                raise QnnrtError(f"context {self.name!r} is closed")
            g = self._graphs.get(name)
            if g is None:
                spec = self.binary.graph(name)
                handle = C.c_void_p()
                mark = self.backend.log.mark()
                self.backend.check(self.backend.api.graphRetrieve(self.handle, name.encode(),
                                                                  C.byref(handle)),
                                   "graphRetrieve", mark, f"for graph {name!r} of {self.name}")
                g = self._graphs[name] = Graph(self, spec, handle)
            return g

    def graphs(self) -> list[Graph]:
        return [self.graph(g.name) for g in self.binary.graphs]

    def close(self, profile: Profile | None = None) -> None:
        """Free the context (idempotent); its graphs stop working."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for g in self._graphs.values():
                g.invalidate()  # waits for an execution in progress on another thread
            self._graphs.clear()
            for buf in reversed(self._shared):
                buf.close()
            self._shared.clear()
            if self.handle:
                check_free(self.backend.api.contextFree(self.handle, profile.handle if profile else None),
                           "contextFree", f"context {self.name!r}")
            self.handle = C.c_void_p()
            if self._group is not None:
                self._group.left(self)

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Context({self.name!r}, {'closed' if self._closed else 'live'})"
