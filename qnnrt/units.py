"""Byte sizes as people write them (2GB, 3.4GiB, 512k) and as qnnrt prints them. Binary units:
QNN's "MB" are MiB, and so are ours."""
from __future__ import annotations

import re

from qnnrt.errors import QnnrtError

UNITS = {"": 1, "b": 1, "byte": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
         "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
         "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
SIZE_RE = r"(?P<num>\d{1,15}(?:\.\d{1,9})?)\s*(?P<unit>[kmgt]i?b|[kmgt]|bytes?|b)?"
_SIZE = re.compile(SIZE_RE, re.I)
MIB = 1 << 20


def to_bytes(num: str | float, unit: str | None) -> int:
    """`num` `unit` (as matched by SIZE_RE) in bytes."""
    return int(round(float(num) * UNITS[(unit or "").lower()]))


def parse_size(text: str | int, what: str = "size") -> int:
    """'2GB' / '3.4GiB' / '512k' / '1048576' -> bytes (binary units)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE.fullmatch(str(text).strip())
        if not m:
            raise QnnrtError(f"{what} {text!r} is not a size; write e.g. 2GB, 3.4GiB, 512MB or a byte count")
        value = to_bytes(m.group("num"), m.group("unit"))
    if value < 0:
        raise QnnrtError(f"{what} {text!r} is negative")
    return value


def format_bytes(n: int | float | None, signed: bool = False) -> str:
    """1536 -> '1.5 KiB', 10524416 -> '10.04 MiB' (None -> 'unknown')."""
    if n is None:
        return "unknown"
    sign = "+" if signed and n >= 0 else ""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{sign}{n / scale:.2f} {unit}"
    return f"{sign}{int(n)} B"
