"""Prompt-lookup drafting: the next tokens guessed by finding the sequence's last n-gram earlier in
the sequence (the prompt and the text so far) and proposing what followed it there (llama.cpp's
lookup decoding, prompt-lookup decoding). No model runs: a draft costs a dictionary lookup."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from qnnrt.errors import InputError


@dataclass(frozen=True)
class LookupOptions:
    """The n-gram sizes tried, longest first: a longer match is a better predictor, a shorter one
    matches more often."""
    ngram_max: int = 3
    ngram_min: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise InputError(f"n-gram sizes: 1 <= min ({self.ngram_min}) <= max ({self.ngram_max}) required")


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class PromptLookup:
    """An index of where each n-gram of the sequence was last followed by a token, kept up to date
    as the sequence grows (each token is indexed once)."""

    def __init__(self, options: LookupOptions | None = None) -> None:
        self.options = options or LookupOptions()
        self._next: dict[tuple[int, ...], int] = {}   # n-gram -> index of the token that last followed it
        self._indexed = 0                             # tokens of the sequence indexed so far

    def _index(self, seq: Sequence[int]) -> None:
        if len(seq) < self._indexed:        # the sequence was cut (a new prompt): start again
            self._next.clear()
            self._indexed = 0
        lo, hi = self.options.ngram_min, self.options.ngram_max
        for j in range(max(self._indexed, 1), len(seq)):
            for n in range(lo, min(hi, j) + 1):
                self._next[tuple(seq[j - n:j])] = j
        self._indexed = len(seq)

    def propose(self, seq: Sequence[int], max_len: int) -> list[int]:
        """Up to `max_len` tokens that followed the longest recent match of the sequence's last
        n-gram (none when nothing matches). A match whose continuation runs into the sequence's
        end continues as the loop it is in: period len(seq) - j."""
        self._index(seq)
        if max_len < 1:
            return []
        for n in range(min(self.options.ngram_max, len(seq) - 1), self.options.ngram_min - 1, -1):
            j = self._next.get(tuple(seq[len(seq) - n:]))
            if j is not None:
                period = len(seq) - j
                return [seq[j + i % period] for i in range(max_len)]
        return []
