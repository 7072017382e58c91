"""Incremental detokenization and stop strings: text that streams out one chunk per token without
splitting a multi-byte character, and without showing the beginning of a stop string."""
from __future__ import annotations

from typing import Callable, Sequence

REPLACEMENT = "\ufffd"   # what a decoder returns for the bytes of an unfinished UTF-8 character
_CONTEXT = 6             # tokens decoded before the new ones, so merges (e.g. leading spaces) show


class IncrementalDetokenizer:
    """Feed token ids one at a time; each call returns the text they add. Text is held back while
    the decoded tail ends in an unfinished character (U+FFFD) and released when it completes, so a
    character split over several byte tokens is never cut across chunks. Each step decodes a window
    that starts before the new tokens (seeded with the end of the prompt), so word boundaries come
    out as a full decode shows them (SentencePiece's leading space)."""

    def __init__(self, decode: Callable[[Sequence[int]], str], context: Sequence[int] = ()):
        self._decode = decode
        self.ids: list[int] = [int(t) for t in context[-_CONTEXT:]]
        self._prefix = 0                 # start of the decoding window
        self._read = len(self.ids)       # ids before this are emitted (or context)
        self.text = ""                   # everything emitted so far

    def add(self, token: int) -> str:
        self.ids.append(int(token))
        return self._step(final=False)

    def flush(self) -> str:
        """At the end of generation: whatever is still held back (an unfinished character stays
        U+FFFD, as a full decode shows it)."""
        return self._step(final=True) if self._read < len(self.ids) else ""

    def _step(self, final: bool) -> str:
        before = self._decode(self.ids[self._prefix:self._read])
        now = self._decode(self.ids[self._prefix:])
        if len(now) <= len(before) or (now.endswith(REPLACEMENT) and not final):
            return ""
        new = now[len(before):]
        self._prefix, self._read = self._read, len(self.ids)
        self.text += new
        return new


class StopMatcher:
    """Cuts generated text at the first stop string. Text that might be the beginning of a stop
    string is held back until the next chunk decides."""

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self._pending = ""
        self.stopped = False

    def feed(self, chunk: str) -> str:
        """The part of ``chunk`` (plus what was held) that is safe to show; sets ``stopped``."""
        if self.stopped:
            return ""
        text = self._pending + chunk
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._pending = ""
            return text[:cut]
        hold = partial_suffix(text, self.stops)
        self._pending = text[len(text) - hold:] if hold else ""
        return text[:len(text) - hold]

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return "" if self.stopped else out


def partial_suffix(text: str, markers: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that is a proper beginning of one of ``markers``
    (text to hold back until the next chunk decides)."""
    best = 0
    for s in markers:
        for n in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:n]):
                best = n
                break
    return best
