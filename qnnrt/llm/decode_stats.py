"""What a generation's multi-token decoding did, counted as the loop keeps tokens (a stop inside a
block keeps fewer than the forward chose): the report's `speculative` section, one layout for
prompt lookup and lookahead."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ForwardGuesses:
    """What one forward checked: guessed tokens offered, and how many of them held."""
    drafted: int = 0
    accepted: int = 0


@dataclass
class DecodeStats:
    mode: str
    plain_forwards: int = 0
    verifications: int = 0              # forwards that checked guessed tokens
    drafted: int = 0                    # guessed tokens offered to those forwards
    accepted: int = 0                   # of them, kept
    tokens: int = 0                     # tokens kept from all forwards
    accepted_per_verification: Counter = field(default_factory=Counter)

    def kept(self, n: int, guesses: ForwardGuesses | None) -> None:
        """A forward whose first n tokens the loop kept (`guesses`: what it checked, None for a
        plain forward); only the held guesses among those n count."""
        self.tokens += n
        if guesses is None:
            self.plain_forwards += 1
            return
        held = min(guesses.accepted, n)
        self.verifications += 1
        self.drafted += guesses.drafted
        self.accepted += held
        self.accepted_per_verification[held] += 1

    def report(self, **extra: Any) -> dict[str, Any]:
        forwards = self.plain_forwards + self.verifications
        return {"mode": self.mode, **extra, "forwards": forwards, "plain_forwards": self.plain_forwards,
                "verifications": self.verifications, "tokens": self.tokens,
                "tokens_per_forward": self.tokens / forwards if forwards else None,
                "drafted": self.drafted, "accepted": self.accepted,
                "acceptance_rate": self.accepted / self.drafted if self.drafted else None,
                "accepted_histogram": {str(k): v for k, v in sorted(self.accepted_per_verification.items())}}
