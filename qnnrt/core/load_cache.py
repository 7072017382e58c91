"""What a load computes from a binary's bytes, kept on disk by file identity: its sha256 (vetting
verdicts and manifest checks are keyed by it) and its HTP pickle headers (the PD-need scan). Both
read every byte of the binary, on every load: most of a big .pte's load time. A second load of the
unchanged file reads them from one small JSON file instead.

Identity is what `os.stat` says of the file as it was mapped (real path, size, mtime and ctime in
ns, inode, device; Windows fills the same fields). Any difference is a miss, and so is an entry
that cannot be read, does not parse or does not match: the facts are computed again and the entry
rewritten (atomically, fileio.write_atomic). A file modified within `RACY_NS` of the computation
is not stored: a write in the same timestamp tick could leave its mtime unchanged. Entries live
under `$QNNRT_CACHE_DIR/load` (fileio.default_cache_dir); `QNNRT_LOAD_CACHE=0` turns the cache off.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from qnnrt.core.pd_need import PickleHeader
from qnnrt.errors import QnnrtError
from qnnrt.fileio import default_cache_dir, loads_json, write_atomic

CACHE_VERSION = 1           # bump when what is cached, or how it is computed, changes
RACY_NS = 2_000_000_000     # a file younger than this (mtime to now) is not cached yet
ENABLE_ENV = "QNNRT_LOAD_CACHE"
_MAX_ENTRY_BYTES = 16 << 20
T = TypeVar("T")


@dataclass(frozen=True)
class FileIdentity:
    """A file as `os.stat` saw it; equal identities mean the same, unchanged file."""
    path: str
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    device: int

    @classmethod
    def of(cls, path: str | os.PathLike, fd: int | None = None) -> FileIdentity | None:
        """The identity of `path` (stat of `fd`, the open file, when given: the file mapped, not
        whatever the path names later); None when it cannot be told."""
        try:
            st = os.fstat(fd) if fd is not None else os.stat(path)
            real = os.path.realpath(path)
        except (OSError, ValueError):
            return None
        return cls(real, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns,
                "ctime_ns": self.ctime_ns, "inode": self.inode, "device": self.device}


@dataclass(frozen=True)
class Origin:
    """Where a binary's bytes lie: `length` bytes at `offset` of a file (a .bin, or a .pte whose
    delegate they are)."""
    file: FileIdentity
    offset: int
    length: int


@dataclass
class CacheStats:
    """This process's lookups (of either fact): what the tests and benchmarks read."""
    hits: int = 0
    misses: int = 0
    stores: int = 0


stats = CacheStats()


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1") not in ("0", "off", "no", "false")


def cache_dir() -> Path:
    return default_cache_dir() / "load"


def entry_path(origin: Origin) -> Path:
    """One entry per (file path, offset, length): other identities of the path overwrite it."""
    key = hashlib.sha256(f"{CACHE_VERSION}\0{origin.file.path}\0{origin.offset}\0{origin.length}"
                         .encode()).hexdigest()
    return cache_dir() / key[:2] / f"{key}.json"


def _read(origin: Origin) -> dict[str, Any]:
    """The facts stored for `origin`, or {} (no entry, unreadable, corrupt, another identity)."""
    p = entry_path(origin)
    try:
        data = loads_json(p.read_bytes(), str(p), max_bytes=_MAX_ENTRY_BYTES)
    except (OSError, QnnrtError, RecursionError, ValueError):
        return {}
    if not (isinstance(data, dict) and data.get("version") == CACHE_VERSION
            and data.get("file") == origin.file.to_dict() and data.get("offset") == origin.offset
            and data.get("length") == origin.length and isinstance(data.get("facts"), dict)):
        return {}
    return data["facts"]


def _store(origin: Origin, facts: dict[str, Any]) -> None:
    """Write the entry; a file too young to trust, or a cache that cannot be written, is skipped
    (it only costs the computation next time)."""
    if time.time_ns() - origin.file.mtime_ns < RACY_NS:
        return
    p = entry_path(origin)
    body = {"version": CACHE_VERSION, "file": origin.file.to_dict(), "offset": origin.offset,
            "length": origin.length, "facts": facts}
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(p, json.dumps(body), "load cache entry", durable=False)
        stats.stores += 1
    except (OSError, QnnrtError):
        pass


def _fact(origin: Origin | None, name: str, compute: Callable[[], T],
          encode: Callable[[T], Any], decode: Callable[[Any], T], fresh: bool = False) -> T:
    """`name` of the bytes at `origin`: from the cache when present and well formed, else (or when
    `fresh`: the cached value is doubted) computed and stored beside the other facts of the entry."""
    if origin is None or not enabled():
        return compute()
    facts = _read(origin)
    if name in facts and not fresh:
        try:
            value = decode(facts[name])
        except (TypeError, ValueError, KeyError, IndexError):
            pass   # malformed: computed again below
        else:
            stats.hits += 1
            return value
    stats.misses += 1
    value = compute()
    _store(origin, {**facts, name: encode(value)})
    return value


def _decode_sha(raw: Any) -> str:
    if not (isinstance(raw, str) and len(raw) == 64 and all(c in "0123456789abcdef" for c in raw)):
        raise ValueError("not a sha256")
    return raw


def _encode_headers(headers: list[PickleHeader]) -> list:
    return [[h.offset, list(h.sz), list(h.mm)] for h in headers]


def _ints(raw: Any) -> tuple[int, ...]:
    if not isinstance(raw, list) or not all(type(x) is int for x in raw):
        raise ValueError("not a list of integers")
    return tuple(raw)


def _decode_headers(raw: Any) -> list[PickleHeader]:
    if not isinstance(raw, list):
        raise ValueError("not a list")
    out = []
    for rec in raw:
        offset, sz, mm = rec
        if type(offset) is not int:
            raise ValueError("offset is not an integer")
        out.append(PickleHeader(offset, _ints(sz), _ints(mm)))
    return out


def sha256(origin: Origin | None, compute: Callable[[], str], fresh: bool = False) -> str:
    """The hex sha256 of the bytes at `origin` (`compute` hashes them on a miss, or when `fresh`:
    the entry is then rewritten, so a wrong entry heals)."""
    return _fact(origin, "sha256", compute, lambda s: s, _decode_sha, fresh)


def pickle_headers(origin: Origin | None,
                   compute: Callable[[], list[PickleHeader]]) -> list[PickleHeader]:
    """The HTP pickle headers of the bytes at `origin` (`compute` scans them on a miss)."""
    return _fact(origin, "pickle_headers", compute, _encode_headers, _decode_headers)
