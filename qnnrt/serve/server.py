"""Run the app with uvicorn on one host and port. Stop signals (SIGINT, SIGTERM, SIGHUP) end the
engine's jobs at their next token and let uvicorn close its connections; the signal is returned so
the command can exit as the CLI's other commands do (128 + signum)."""
from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
from types import FrameType
from typing import Any, Callable, Iterator

import uvicorn

from qnnrt.errors import QnnrtError
from qnnrt.serve.connections import guarded_protocol
from qnnrt.serve.options import ConnectionOptions
from qnnrt.serve.engine import Engine

SHUTDOWN_GRACE_S = 5     # connections still open this long after a stop signal are closed
BACKLOG = 1024           # connections the kernel holds before they are accepted


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, engine: Engine, stop_signals: list[int],
                 on_listening: Callable[[str, int], None]):
        super().__init__(config)
        self.engine, self.stop_signals, self.on_listening = engine, stop_signals, on_listening
        self.signum: int | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            if self.signum is None:
                self.signum = signum
                self.should_exit = True
                self.engine.abort()
            else:
                self.force_exit = True

        previous: dict[int, Any] = {}
        for s in self.stop_signals:
            with contextlib.suppress(OSError, ValueError):
                previous[s] = signal.signal(s, handler)
        try:
            yield
        finally:
            for s, h in previous.items():
                with contextlib.suppress(OSError, ValueError, TypeError):
                    signal.signal(s, h)

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            self.on_listening(f"[{host}]" if ":" in host else host, port)


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a taken port or a bad address is a clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=BACKLOG)
    except (OSError, OverflowError) as e:
        raise QnnrtError(f"cannot listen on {host}:{port}: {e.strerror if isinstance(e, OSError) else e} "
                         f"(choose another --port, or --host)") from None
    # asyncio sets TCP_NODELAY only on sockets it made itself (proto IPPROTO_TCP); accepted
    # connections inherit it from the listener, so small responses are not held back by Nagle's
    # algorithm against the client's delayed ACK
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def run_server(app: Any, engine: Engine, sock: socket.socket, *, log_level: str, stop_signals: list[int],
               connections: ConnectionOptions) -> int | None:
    """Serve on ``sock`` until a stop signal; the signal. Connections are guarded by ``connections``
    (serve/connections.py), not by uvicorn's limit_concurrency."""
    def listening(h: str, p: int) -> None:
        print(f"qnnrt serve: listening on http://{h}:{p}/v1", flush=True)

    config = uvicorn.Config(app, log_level=log_level, access_log=log_level == "info",
                            lifespan="off", timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
                            http=guarded_protocol(connections), timeout_keep_alive=connections.keep_alive_s,
                            server_header=False, backlog=BACKLOG)
    server = _Server(config, engine, stop_signals, listening)
    server.run(sockets=[sock])
    sys.stdout.flush()
    return server.signum
