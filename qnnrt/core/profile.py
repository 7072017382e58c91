"""Profile: a QNN profile handle at a level, attached to context creation and graph execution, and
its event tree read back as plain dicts."""
from __future__ import annotations

import ctypes as C
from collections.abc import Iterator

from qnnrt._capi import types as T
from qnnrt.core.backend import Backend
from qnnrt.core.freeing import check_free
from qnnrt.errors import QnnrtError


# the levels users choose ("off" creates no QNN profile); the ABI numbers are in _capi.types
PROFILE_LEVELS = ("off", "basic", "detailed")


class Profile:
    """Owns one QNN profile handle. `events()` returns the events recorded since the last call as
    `{"name", "type", "unit", "value", "sub": [...]}` trees (QNN accumulates; we read, then reset by
    creating the next handle lazily)."""

    def __init__(self, backend: Backend, level: str = "basic"):
        if level not in T.PROFILE_LEVELS:
            raise QnnrtError(f"unknown profile level {level!r}; use one of "
                             f"{', '.join(T.PROFILE_LEVELS)}")
        self.backend = backend
        self.level = level
        self.handle = C.c_void_p()
        mark = backend.log.mark()
        backend.check(backend.api.profileCreate(backend.handle, T.PROFILE_LEVELS[level],
                                                C.byref(self.handle)), "profileCreate", mark)
        backend.adopt(self)

    @property
    def closed(self) -> bool:
        return not self.handle

    def _event(self, eid: int) -> dict:
        api = self.backend.api
        d = T.ProfileEventData()
        if api.profileGetEventData(eid, C.byref(d)) == 0:
            ev = {"name": (d.identifier or b"").decode(errors="replace"), "type": int(d.type),
                  "unit": T.PROFILE_UNITS.get(d.unit, str(d.unit)), "value": int(d.value)}
        else:
            e = T.ProfileExtendedEventData()
            if api.profileGetExtendedEventData(eid, C.byref(e)) != 0:
                return {"name": "<unreadable event>", "type": -1, "unit": "none", "value": 0,
                        "sub": []}
            v = e.v1
            ev = {"name": (v.identifier or b"").decode(errors="replace"), "type": int(v.type),
                  "unit": T.PROFILE_UNITS.get(v.unit, str(v.unit)),
                  "value": int(v.value.uint64Value), "timestamp": int(v.timestamp)}
        ids = C.POINTER(C.c_uint64)()
        n = C.c_uint32()
        subs = []
        if api.profileGetSubEvents(eid, C.byref(ids), C.byref(n)) == 0:
            subs = [self._event(ids[i]) for i in range(n.value)]
        ev["sub"] = subs
        return ev

    def events(self) -> list[dict]:
        if not self.handle:
            raise QnnrtError("profile is closed")
        ids = C.POINTER(C.c_uint64)()
        n = C.c_uint32()
        self.backend.check(self.backend.api.profileGetEvents(self.handle, C.byref(ids), C.byref(n)),
                           "profileGetEvents")
        return [self._event(ids[i]) for i in range(n.value)]

    def close(self) -> None:
        if self.handle:
            check_free(self.backend.api.profileFree(self.handle), "profileFree", f"a {self.level} profile")
        self.handle = C.c_void_p()

    def __enter__(self) -> Profile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def flatten_events(events: list[dict], depth: int = 0) -> Iterator[tuple[int, dict]]:
    """(depth, event) pairs of an event tree, parents first."""
    for ev in events:
        yield depth, ev
        yield from flatten_events(ev.get("sub", []), depth + 1)
