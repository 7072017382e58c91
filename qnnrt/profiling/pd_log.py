"""QNN's verbose log states each context's PD (protection domain) estimate: this reads it."""
from __future__ import annotations

import re
from typing import Iterable

from qnnrt.units import to_bytes

_NUM_UNIT = r"~?\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[kmg]i?b|[kmg]|bytes?|b)?\b"
_CTX_REQ = re.compile(r"estimated\s+pd\s+size\s+requirement\s*(?:is|=|:)?\s*" + _NUM_UNIT, re.I)
_EXACT = re.compile(r"largest\s+graph\s+estimate\s+(?P<bytes>\d+)\s*b\b", re.I)
_RESERVED = re.compile(r"setting\s+context\s+\d+\s+reserved\s+space\s+to\s+(?P<bytes>\d+)", re.I)
_AVAILABLE = re.compile(r"not\s+chosen\s+for\s+context\s+\d+\s+with\s+size\s+estimate\s+(?P<need>\d+)\s*,"
                        r"\s*available\s+space\s+(?P<bytes>\d+)", re.I)
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


def _texts(lines: Iterable[str | tuple[int, str]]) -> Iterable[str]:
    for line in lines:
        yield line[1] if isinstance(line, tuple) else line


def pd_reserved_from_log(lines: Iterable[str | tuple[int, str]]) -> int | None:
    """Bytes QNN reserved for the context created in these log lines: the exact "Setting context N
    reserved space to S" (the sum over the context's graphs), else None."""
    found = None
    for text in _texts(lines):
        m = _RESERVED.search(text)
        if m:
            found = int(m.group("bytes"))
    return found


def pd_available_from_log(lines: Iterable[str | tuple[int, str]]) -> int | None:
    """Free PD bytes QNN stated when a creation failed for lack of PD ("pd 0 not chosen for context
    N with size estimate E, available space A"): the largest A over the PDs tried, else None."""
    found = None
    for text in _texts(lines):
        m = _AVAILABLE.search(text)
        if m:
            found = max(found or 0, int(m.group("bytes")))
    return found


def pd_estimate_from_log(lines: Iterable[str | tuple[int, str]]) -> int | None:
    """The context's PD reservation in log lines captured around one create (str or (level, text)):
    the exact "reserved space" line when present (right for multi-graph contexts, whose "largest
    Graph estimate" is only the largest graph), else the last estimate line."""
    lines = list(lines)
    reserved = pd_reserved_from_log(lines)
    if reserved is not None:
        return reserved
    found = None
    for text in _texts(lines):
        value = parse_pd_estimate(text)
        if value is not None:
            found = value
    return found
