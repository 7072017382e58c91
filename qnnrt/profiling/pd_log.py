"""QNN's verbose log states each context's PD (protection domain) estimate: this reads it."""
from __future__ import annotations

import re
from typing import Iterable

from qnnrt.units import to_bytes

_NUM_UNIT = r"~?\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[kmg]i?b|[kmg]|bytes?|b)?\b"
_CTX_REQ = re.compile(r"estimated\s+pd\s+size\s+requirement\s*(?:is|=|:)?\s*" + _NUM_UNIT, re.I)
_EXACT = re.compile(r"largest\s+graph\s+estimate\s+(?P<bytes>\d+)\s*b\b", re.I)
_PD_FAIL = re.compile(r"context\s+size\s+estimate\s*[:=]?\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[kmg]i?b|bytes?|b)?",
                      re.I)


def parse_pd_estimate(log_line: str) -> int | None:
    """Bytes of a context's PD estimate stated in a QNN log line, else None.

    Understands "Context 3 estimated PD size requirement is ~10.04MB, including largest Graph estimate
    10523136 B" (QNN's MB are MiB: 10523136 B is printed as ~10.04MB; the exact byte count is used when
    it agrees with the rounded figure) and the failure line "Failed to find available PD for contextId
    347 ... with context size estimate 10524416" (bytes). Per-graph lines ("Context 1 graph G estimated
    PD size ~10.04MB") are not context totals and give None.
    """
    m = _CTX_REQ.search(log_line)
    if m:
        approx = to_bytes(m.group("num"), m.group("unit"))
        exact = _EXACT.search(log_line)
        if exact:
            b = int(exact.group("bytes"))
            if abs(b - approx) <= max(0.01 * approx, 1 << 14):
                return b
        return int(round(approx))
    m = _PD_FAIL.search(log_line)
    if m:
        return to_bytes(m.group("num"), m.group("unit"))
    return None


def pd_estimate_from_log(lines: Iterable[str | tuple[int, str]]) -> int | None:
    """The last context PD estimate in log lines captured around one create (str or (level, text))."""
    found = None
    for line in lines:
        text = line[1] if isinstance(line, tuple) else line
        value = parse_pd_estimate(text)
        if value is not None:
            found = value
    return found
