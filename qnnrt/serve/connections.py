"""Connection hygiene in front of the app, as production HTTP servers have it: a request's header must
arrive within ``header_timeout_s`` of the connection (or of the previous response on a kept-alive
one), its body may pause at most ``body_timeout_s`` between reads, and at most ``max_connections``
are open at once. A connection over that limit first evicts the oldest one that has not sent a whole
request header (an idle or slow client); only when every connection is busy with a request is the new
one closed. So clients that send nothing (or a header a byte at a time) can neither hold a connection
for long nor fill the limit that /health and well-behaved clients need.

uvicorn's own `limit_concurrency` answers 503 to every request once connections reach it, idle ones
included (issue 47: 78 partial headers denied /health): it is not used; this h11 protocol subclass
keeps the limit instead."""
from __future__ import annotations

import asyncio
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from qnnrt.serve.options import ConnectionOptions


def guarded_protocol(options: ConnectionOptions) -> type[H11Protocol]:
    """uvicorn's h11 protocol with ``options``' deadlines and limit (uvicorn.Config(http=...))."""

    class Guarded(_Guarded):
        opts = options
    return Guarded


class _Guarded(H11Protocol):
    opts: ConnectionOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self.waiting_since: float | None = None      # not None: no whole request header yet

    # -- the deadlines ------------------------------------------------------------------------
    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        """Too slow: closed (a request in the middle of its body sees the client gone)."""
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def _await_request(self) -> None:
        self.waiting_since = time.monotonic()
        self._arm(self.opts.header_timeout_s)

    def _track(self, before: Any) -> None:
        """After events were handled: a new request stops the header clock; a body still coming
        (re)starts the body clock; a whole body stops it."""
        cycle = self.cycle
        if cycle is not None and cycle is not before:
            self.waiting_since = None
            self._disarm()
        if self.waiting_since is None and cycle is not None and not cycle.response_complete:
            if cycle.more_body and not cycle.disconnected:
                self._arm(self.opts.body_timeout_s)
            else:
                self._disarm()

    # -- the protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_request()
        if len(self.connections) > self.opts.max_connections:
            self._make_room()

    def _make_room(self) -> None:
        """Evict the connection that has waited longest for a request header (this one, if it is
        the only kind there is not); else close this one."""
        idle = [c for c in self.connections if isinstance(c, _Guarded) and c.waiting_since is not None
                and not c.transport.is_closing()]
        victim = min(idle, key=lambda c: c.waiting_since or 0.0) if idle else self
        victim.transport.close()

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        super().data_received(data)
        self._track(before)

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._await_request()           # before uvicorn handles a pipelined request (it stops the clock)
        before = self.cycle
        super().on_response_complete()
        if self.cycle is not before:
            self._track(before)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.waiting_since = None
        super().connection_lost(exc)
