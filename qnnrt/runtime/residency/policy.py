"""What a residency policy is, and the registry that maps what users write in `--residency` to one.

The pool (pool.py) owns the contexts and every mechanism (creation, accounting, the prefetch
thread, the one eviction loop); a policy only answers its questions: what to create before the
first call, what bound to keep the live set in, which idle context to evict, what to prefetch,
whether to free a context as soon as its call is done. A new policy is one file with a frozen
dataclass registered by `@register` (built-in ones live in policies/, found at import)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from qnnrt.errors import QnnrtError
from qnnrt.runtime.residency.order import CallOrder, farthest_next_use


@dataclass(frozen=True)
class Bound:
    """What a policy keeps the live set within (contexts live or being created); the pool evicts
    the policy's victims to stay inside it.

    `max_live` counts contexts, `max_bytes` their planned PD bytes; `pd_budget` adds this backend's
    PD budget (given, learned or the simulator's; other programs' contexts in the process count
    against it). `evict_when_full`: a creation that fails for lack of PD lowers the bound to what
    fitted, evicts and retries; without it the failure is the caller's (as the field would see it).
    """
    max_live: int | None = None
    max_bytes: int | None = None
    pd_budget: bool = False
    evict_when_full: bool = False


@dataclass(frozen=True)
class Spread:
    """Contexts may go to several PDs, one per process (runtime/hosts/pd/placement.py `place`): always (`forced`),
    or only when one PD cannot hold them; `pds` asks for exactly that many."""
    forced: bool
    pds: int | None = None


class Residency:
    """A residency policy. The defaults create a context at its first use and keep it (lazy);
    subclasses are frozen dataclasses whose fields are the policy's parameters."""

    name: ClassVar[str]           # what users write in --residency (before any ':')
    usage: ClassVar[str] = ""     # how it is written when it takes an argument (error messages)
    resident: ClassVar[bool] = False        # every context is live from load to close
    free_after_use: ClassVar[bool] = False  # free a context as soon as its last call is done

    @classmethod
    def from_argument(cls, arg: str | None, text: str) -> Residency:
        """The policy `text` spells; `arg` is what follows 'name:' (None without a colon)."""
        if arg is not None:
            raise QnnrtError(f"residency {text!r}: {cls.name} takes no argument; write {cls.name}")
        return cls()

    @staticmethod
    def parse(text: str | Residency) -> Residency:
        """A policy from what users write (`auto`, `bounded:2GB`, ...); a policy is returned as is."""
        if isinstance(text, Residency):
            return text
        name, colon, arg = str(text).strip().lower().partition(":")
        cls = _REGISTRY.get(name)
        if cls is None:
            spellings = [c.usage or c.name for c in _REGISTRY.values()]
            raise QnnrtError(f"unknown residency {text!r}; use {', '.join(spellings[:-1])} or "
                             f"{spellings[-1]}")
        return cls.from_argument(arg if colon else None, str(text))

    def __str__(self) -> str:
        return self.name

    @property
    def bound(self) -> Bound:
        return Bound()

    @property
    def spread(self) -> Spread | None:
        """None: every context in this process's PD."""
        return None

    def preload(self, keys: Sequence[str]) -> list[str]:
        """The contexts to create before the first call (of the pool's, in their order)."""
        return []

    def victim(self, idle: Sequence[str], order: CallOrder, position: int) -> str | None:
        """The idle live context to evict to stay within the bound, at the call at `position` of
        `order`; None: none of them may go."""
        return farthest_next_use(idle, order, position)

    def prefetch(self, order: CallOrder, position: int, current: str) -> str | None:
        """The context to create in the background while the call at `position` (of `current`)
        runs, or after it; None: nothing."""
        return None


P = TypeVar("P", bound=type[Residency])
_REGISTRY: dict[str, type[Residency]] = {}


def register(policy: P) -> P:
    """Make `policy` what `--residency <policy.name>[:...]` means (a class decorator)."""
    name = getattr(policy, "name", "")
    if not name or name != name.strip().lower() or ":" in name:
        raise QnnrtError(f"residency policy {policy.__qualname__}: its `name` must be a lower-case "
                         f"word without ':' (got {name!r})")
    held = _REGISTRY.get(name)
    if held is not None and (held.__module__, held.__qualname__) != (policy.__module__, policy.__qualname__):
        raise QnnrtError(f"residency {name!r} is already {held.__module__}.{held.__qualname__}")
    _REGISTRY[name] = policy
    return policy


def whole_number(arg: str, text: str, letter: str) -> int:
    """`arg` as a count >= 1, else a clear error naming `text` and the argument's `letter`."""
    if not arg.isdigit() or int(arg) < 1:
        raise QnnrtError(f"residency {text!r}: {letter} must be a whole number >= 1")
    return int(arg)

