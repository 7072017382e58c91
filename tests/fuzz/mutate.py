"""A seeded mutator for qnnrt's inputs: byte-level damage for every format, JSON-aware damage for
program manifests and path tricks (symlink loops, links and paths leading outside) for folders.

Every mutation is a function of (seed bytes or folder, random.Random) so a case is reproduced by its
reader, seed number and case index (`case_rng`)."""
from __future__ import annotations

import json
import os
import random
import shutil
import struct
from pathlib import Path
from typing import Callable

INTERESTING_U32 = (0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)


def case_rng(reader: str, seed: int, index: int) -> random.Random:
    return random.Random(f"{reader}:{seed}:{index}")


# -- bytes ------------------------------------------------------------------------------------------

def bit_flips(data: bytes, rng: random.Random) -> bytes:
    d = bytearray(data)
    for _ in range(rng.choice((1, 2, 4, 8, 32))):
        i = rng.randrange(len(d))
        d[i] ^= 1 << rng.randrange(8)
    return bytes(d)


def byte_overwrite(data: bytes, rng: random.Random) -> bytes:
    d = bytearray(data)
    for _ in range(rng.choice((1, 4, 16))):
        i = rng.randrange(len(d))
        d[i] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
    return bytes(d)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.choice((0, 1, 8, 63, 64, rng.randrange(len(data)), len(data) - 1))]


def insert(data: bytes, rng: random.Random) -> bytes:
    i = rng.randrange(len(data) + 1)
    junk = bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 64, 512))))
    return data[:i] + junk + data[i:]


def huge_length(data: bytes, rng: random.Random) -> bytes:
    """Overwrite aligned 32/64-bit words with huge or boundary values (length and count fields)."""
    d = bytearray(data)
    for _ in range(rng.choice((1, 2, 4))):
        wide = rng.random() < 0.3
        n = 8 if wide else 4
        i = rng.randrange(0, max(1, len(d) - n)) & ~(n - 1)
        if wide:
            struct.pack_into("<Q", d, i, rng.choice((1 << 40, (1 << 63) - 1, (1 << 64) - 1)))
        else:
            struct.pack_into("<I", d, i, rng.choice(INTERESTING_U32))
    return bytes(d)


def chunk_copy(data: bytes, rng: random.Random) -> bytes:
    """Copy one region over another (breaks offsets while keeping plausible values)."""
    d = bytearray(data)
    n = rng.choice((4, 16, 64))
    a, b = rng.randrange(max(1, len(d) - n)), rng.randrange(max(1, len(d) - n))
    d[b:b + n] = data[a:a + n]
    return bytes(d)


BYTE_MUTATORS: list[Callable[[bytes, random.Random], bytes]] = [
    bit_flips, byte_overwrite, truncate, insert, huge_length, chunk_copy]


def mutate_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    f = rng.choice(BYTE_MUTATORS)
    return f(data, rng), f.__name__


# -- JSON (program.json) ----------------------------------------------------------------------------

def _paths(obj, prefix=()):
    yield prefix, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _set(obj, path, value):
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


WRONG_VALUES = [None, True, -1, 0, 1 << 70, 1.5e308, "", "x", [], {}, [1, 2], {"a": 1},
                "\u0000", "a\u0000b", "\udcff", "../outside.bin", "/etc/hostname", "contexts",
                "contexts/", "contexts/../program.json", "C:\\x.bin", "\\\\server\\x"]


def mutate_json(text: str, rng: random.Random) -> tuple[str | bytes, str]:
    """One structural mutation of a JSON document (or the raw text)."""
    data = json.loads(text)
    kind = rng.choice(("wrong_type", "wrong_type", "delete", "deep", "huge_number", "nul",
                       "non_utf8", "path_outside", "dup", "raw"))
    nodes = [p for p, _ in _paths(data) if p]
    if kind == "wrong_type" and nodes:
        _set(data, rng.choice(nodes), rng.choice(WRONG_VALUES))
    elif kind == "delete" and nodes:
        p = rng.choice(nodes)
        parent = data
        for k in p[:-1]:
            parent = parent[k]
        del parent[p[-1]]
    elif kind == "deep":
        depth = rng.choice((100, 1000, 20000))
        nest = "[" * depth + "]" * depth if rng.random() < 0.5 else '{"a":' * depth + "1" + "}" * depth
        s = json.dumps(data)
        return s.replace('"target":', f'"deep": {nest}, "target":', 1) if '"target":' in s else nest, kind
    elif kind == "huge_number":
        digits = "9" * rng.choice((25, 400, 5000, 100000))
        s = json.dumps(data)
        return s.replace('"size": ', f'"size": {digits}0', 1).replace('"version": 1', '"version": '
                                                                          + digits, 1), kind
    elif kind == "nul":
        strs = [p for p, v in _paths(data) if p and isinstance(v, str)]
        if strs:
            p = rng.choice(strs)
            v = data
            for k in p:
                v = v[k]
            _set(data, p, v[:1] + "\u0000" + v[1:])
    elif kind == "non_utf8":
        raw = json.dumps(data).encode()
        i = raw.find(b'"name": "') + 9
        return raw[:i] + b"\xff\xfe\xc3" + raw[i:], kind
    elif kind == "path_outside":
        strs = [p for p, v in _paths(data) if p and p[-1] in ("path", "model")]
        if strs:
            _set(data, rng.choice(strs), rng.choice(("../x.bin", "/etc/hostname", "/dev/zero",
                                                     "contexts/../../x", "/proc/self/mem")))
    elif kind == "dup":
        if data.get("contexts"):
            data["contexts"].append(dict(data["contexts"][0]))
    else:
        return mutate_bytes(text.encode(), rng)[0], "raw_" + kind
    return json.dumps(data), kind


# -- folders ----------------------------------------------------------------------------------------

def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def link_tricks(folder: Path, rel_file: str, rng: random.Random) -> str:
    """Replace `folder/rel_file` by a symbolic link loop, a link outside, a dangling link, a link
    to a directory, or a FIFO."""
    target = folder / rel_file
    kind = rng.choice(("loop", "outside", "dangling", "dir", "fifo", "self"))
    if target.exists() or target.is_symlink():
        target.unlink()
    if kind == "loop":
        a = target.parent / "loop_a"
        os.symlink("loop_b", a)
        os.symlink("loop_a", target.parent / "loop_b")
        os.symlink("loop_a", target)
    elif kind == "outside":
        os.symlink("/etc/hostname" if os.path.exists("/etc/hostname") else "/etc/passwd", target)
    elif kind == "dangling":
        os.symlink("does_not_exist.bin", target)
    elif kind == "dir":
        os.symlink(".", target)
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        os.symlink(target.name, target)
    return "link_" + kind
