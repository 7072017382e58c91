"""The load cache (core/load_cache.py): a second load of an unchanged file reads the sha256 and the
PD-need pickle headers of its binaries instead of passing over their bytes again; a touched or
changed file, a corrupt or unreadable entry, or a file too young to trust is computed again; the
results never differ from computing them."""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

import qnnrt
from qnnrt.core import ContextBinary, load_cache, pd_need
from qnnrt import fileio
from qnnrt.loader import LoadOptions
from tests.helpers.data import EXECUTORCH

PTE = EXECUTORCH / "many_4_fp16"
HOUR_NS = 3600 * 10**9


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A private cache folder (vetting verdicts too), and calls to the two computations counted."""
    monkeypatch.setenv("QNNRT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(load_cache.ENABLE_ENV, raising=False)
    return tmp_path / "cache"


@pytest.fixture
def calls(monkeypatch) -> dict[str, int]:
    counts = {"sha256": 0, "pickle_headers": 0}
    real_sha, real_headers = fileio.buffer_sha256, pd_need.pickle_headers

    def sha(buffer):
        counts["sha256"] += 1
        return real_sha(buffer)

    def headers(buffer):
        counts["pickle_headers"] += 1
        return real_headers(buffer)
    monkeypatch.setattr(fileio, "buffer_sha256", sha)
    monkeypatch.setattr(pd_need, "pickle_headers", headers)
    return counts


def _aged(src: Path, dst: Path) -> Path:
    """A copy of `src` whose mtime is an hour ago (old enough to be cached)."""
    shutil.copyfile(src, dst)
    _set_mtime(dst, time.time_ns() - HOUR_NS)
    return dst


def _set_mtime(path: Path, ns: int) -> None:
    os.utime(path, ns=(ns, ns))


def _facts(b: ContextBinary) -> tuple[str, dict]:
    return b.sha256(), b.pd_need().to_dict()


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "load").rglob("*.json"))


def test_a_second_open_reads_the_cache(small_binary, cache, calls, tmp_path):
    path = _aged(small_binary.path, tmp_path / "a.bin")
    with ContextBinary(path) as b:
        first = _facts(b)
    assert calls == {"sha256": 1, "pickle_headers": 1} and len(_entries(cache)) == 1
    hits = load_cache.stats.hits
    with ContextBinary(path) as b:
        assert _facts(b) == first
    assert calls == {"sha256": 1, "pickle_headers": 1}      # neither computed again
    assert load_cache.stats.hits == hits + 2
    assert first[0] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_second_load_of_a_pte_hashes_and_scans_nothing(cache, calls, tmp_path):
    """qnnrt.load (vetting on: its verdicts are keyed by the hash) of an unchanged .pte: every
    delegate's hash and headers from the cache, the same verdicts, needs and outputs."""
    path = _aged(PTE / "model.pte", tmp_path / "model.pte")
    x = np.load(PTE / "forward_input_0.npy")

    def load_once() -> tuple[list, dict, np.ndarray]:
        with qnnrt.load(path, options=LoadOptions(vet="create")) as p:
            verdicts = [(r.sha256, r.verdict) for r in p.vet_reports[0].results]
            needs = {k: b.pd_need().to_dict() for k, b in p.binaries.items()}
            (out,) = p.run("forward", [x]).values()
            return verdicts, needs, out
    first = load_once()
    n = len(first[1])
    assert n > 1 and calls == {"sha256": n, "pickle_headers": n}
    second = load_once()
    assert calls == {"sha256": n, "pickle_headers": n}      # the second load computed neither
    assert second[:2] == first[:2] and np.array_equal(second[2], first[2])


def test_a_touched_file_is_computed_again(small_binary, cache, calls, tmp_path):
    path = _aged(small_binary.path, tmp_path / "a.bin")
    with ContextBinary(path) as b:
        first = _facts(b)
    _set_mtime(path, time.time_ns() - HOUR_NS // 2)         # same bytes, another mtime
    with ContextBinary(path) as b:
        assert _facts(b) == first
    assert calls == {"sha256": 2, "pickle_headers": 2}
    with ContextBinary(path) as b:                           # and the new identity is cached
        _facts(b)
    assert calls == {"sha256": 2, "pickle_headers": 2}


def test_changed_bytes_under_the_old_mtime_are_computed_again(small_binary, cache, calls, tmp_path):
    """Same size, mtime put back: the ctime (or a new inode) still tells the change."""
    path = _aged(small_binary.path, tmp_path / "a.bin")
    mtime = path.stat().st_mtime_ns
    with ContextBinary(path) as b:
        old_sha = b.sha256()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    _set_mtime(path, mtime)
    with ContextBinary(path) as b:
        assert b.sha256() == hashlib.sha256(bytes(data)).hexdigest() != old_sha
    assert calls["sha256"] == 2


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong shape", "bad values", "directory"])
def test_a_corrupt_or_unreadable_entry_is_ignored(small_binary, cache, calls, tmp_path, damage):
    path = _aged(small_binary.path, tmp_path / "a.bin")
    with ContextBinary(path) as b:
        first = _facts(b)
    (entry,) = _entries(cache)
    text = entry.read_text()
    if damage == "garbage":
        entry.write_bytes(os.urandom(256))
    elif damage == "truncated":
        entry.write_text(text[: len(text) // 2])
    elif damage == "wrong shape":
        entry.write_text('{"version": 1, "facts": [1, 2]}')
    elif damage == "bad values":
        entry.write_text(text.replace('"sha256": "', '"sha256": "zz').replace(
            '"pickle_headers": [[', '"pickle_headers": [["x", '))
    else:
        entry.unlink()
        entry.mkdir()
    with ContextBinary(path) as b:
        assert _facts(b) == first
    assert calls == {"sha256": 2, "pickle_headers": 2}
    if damage != "directory":                                # rewritten, and read next time
        with ContextBinary(path) as b:
            assert _facts(b) == first
        assert calls == {"sha256": 2, "pickle_headers": 2}


def test_a_file_too_young_to_trust_is_not_stored(small_binary, cache, calls, tmp_path):
    path = tmp_path / "a.bin"
    shutil.copyfile(small_binary.path, path)                  # mtime: now
    for _ in range(2):
        with ContextBinary(path) as b:
            b.sha256()
    assert calls["sha256"] == 2 and not _entries(cache)


def test_the_cache_can_be_turned_off(small_binary, cache, calls, tmp_path, monkeypatch):
    monkeypatch.setenv(load_cache.ENABLE_ENV, "0")
    path = _aged(small_binary.path, tmp_path / "a.bin")
    for _ in range(2):
        with ContextBinary(path) as b:
            b.sha256()
    assert calls["sha256"] == 2 and not _entries(cache)


def test_a_buffer_without_origin_is_not_cached(small_binary, cache, calls):
    data = small_binary.path.read_bytes()
    for _ in range(2):
        b = ContextBinary(buffer=data)
        assert b.origin is None
        assert b.sha256() == hashlib.sha256(data).hexdigest()
    assert calls["sha256"] == 2 and not _entries(cache)


def test_a_wrong_but_well_formed_sha256_entry_heals(two_method_program, cache, calls, tmp_path):
    """Issue 47: an entry holding another (valid-looking) hash made every later load of an intact
    program fail against its manifest. The manifest check doubts the cached value, hashes the bytes
    again and rewrites the entry."""
    import json
    folder = tmp_path / "prog"
    shutil.copytree(two_method_program, folder)
    binary = folder / "contexts" / "shared.bin"
    _set_mtime(binary, time.time_ns() - HOUR_NS)
    manifest = json.loads((folder / "program.json").read_text())
    good = hashlib.sha256(binary.read_bytes()).hexdigest()
    manifest["contexts"][0]["sha256"] = good
    (folder / "program.json").write_text(json.dumps(manifest))
    with qnnrt.load(str(folder)):
        pass
    (entry,) = _entries(cache)
    entry.write_text(entry.read_text().replace(good, "0" * 64))
    with qnnrt.load(str(folder)):                       # not "the binary was corrupted"
        pass
    assert good in entry.read_text() and "0" * 64 not in entry.read_text()
    calls_before = calls["sha256"]
    with qnnrt.load(str(folder)):                       # healed: read from the cache again
        pass
    assert calls["sha256"] == calls_before
