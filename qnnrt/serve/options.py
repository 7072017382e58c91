"""`qnnrt serve`'s settings that the CLI builds before the ASGI stack is imported (plain data)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConnectionOptions:
    """How long a client may take and how many may be connected (serve/connections.py)."""
    header_timeout_s: float = 10.0     # connect (or previous response) -> whole request header
    body_timeout_s: float = 15.0       # longest pause between two reads of a request body
    keep_alive_s: int = 5              # an idle kept-alive connection is closed after this
    max_connections: int = 1000        # open at once; idle ones are evicted first
