"""Reading inputs (.npy, .raw, QNN input lists) and writing outputs (.npy + ExecuTorch-style .raw)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from qnnrt.errors import InputError
from qnnrt.runtime.method import IOSpec


def _read_raw(path: Path, spec: IOSpec) -> np.ndarray:
    if any(d is None for d in spec.shape):
        raise InputError(f"{path}: input {spec.name!r} has a free dimension {spec.shape}; give "
                         f"it as .npy so its shape is known")
    count = int(np.prod(spec.shape, dtype=np.int64))
    size = path.stat().st_size
    for dtype in (spec.dtype, np.dtype(np.float32)):
        if size == count * dtype.itemsize:
            return np.fromfile(path, dtype=dtype).reshape(spec.shape)
    fits = [f"{spec.dtype} ({count * spec.dtype.itemsize} bytes)"]
    if spec.dtype != np.float32:
        fits.append(f"float32 ({count * 4} bytes)")
    raise InputError(f"{path}: {size} bytes does not fit input {spec.name!r} {spec.shape} as "
                     + " or ".join(fits))


def read_array(path: str | Path, spec: IOSpec) -> np.ndarray:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file {path} does not exist (for input {spec.name!r})")
    if path.suffix == ".npy":
        try:
            return np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise InputError(f"{path}: not a readable .npy file ({e})") from e
    return _read_raw(path, spec)


def parse_inputs_arg(text: str, specs: list[IOSpec]) -> list[dict[str, np.ndarray]]:
    """`a.npy,b.npy` (graph input order) or `name:=a.npy,...` -> one feed."""
    return [_parse_line(re.split(r"[,\s]+", text.strip()), specs, "--inputs")]


def _parse_line(items: list[str], specs: list[IOSpec], where: str) -> dict[str, np.ndarray]:
    items = [i for i in items if i]
    names = [s.name for s in specs]
    by_name = {s.name: s for s in specs}
    feed: dict[str, np.ndarray] = {}
    if any(":=" in i for i in items):
        for item in items:
            if ":=" not in item:
                raise InputError(f"{where}: mix of named (name:=path) and positional entries")
            name, path = item.split(":=", 1)
            if name not in by_name:
                raise InputError(f"{where}: unknown input {name!r}; inputs are {names}")
            feed[name] = read_array(path, by_name[name])
        missing = [n for n in names if n not in feed]
        if missing:
            raise InputError(f"{where}: missing input(s) {missing}")
        return feed
    if len(items) != len(specs):
        raise InputError(f"{where}: {len(items)} file(s) given, the method has {len(specs)} "
                         f"input(s) {names}")
    return {s.name: read_array(p, s) for s, p in zip(specs, items)}


def read_input_list(path: str | Path, specs: list[IOSpec]) -> list[dict[str, np.ndarray]]:
    """QNN input list: one line per inference, whitespace-separated files in input order, or
    `name:=path` entries; `#` starts a comment; relative paths are relative to the list file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input list {path} does not exist")
    feeds = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        items = []
        for item in line.split():
            name, sep, p = item.rpartition(":=")
            pp = Path(p)
            if not pp.is_absolute():  # relative to the list file, as QNN's tools read it
                pp = path.parent / pp
            items.append(f"{name}{sep}{pp}")
        feeds.append(_parse_line(items, specs, f"{path}:{lineno}"))
    if not feeds:
        raise InputError(f"input list {path} has no entries")
    return feeds


def random_inputs(specs: list[IOSpec], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    for s in specs:
        shape = tuple(d if d is not None else 1 for d in s.shape)
        if s.is_fixed_point or s.dtype.kind == "f":
            feed[s.name] = rng.standard_normal(shape).astype(
                np.float32 if s.is_fixed_point else s.dtype)
        elif s.dtype.kind == "b":
            feed[s.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feed[s.name] = rng.integers(0, 8, shape).astype(s.dtype)
    return feed


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "output"


def write_outputs(out_dir: Path, iteration: int, outputs: dict[str, np.ndarray],
                  npy: bool) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    used: set[str] = set()
    for index, (name, arr) in enumerate(outputs.items()):
        raw = out_dir / f"output_{iteration}_{index}.raw"
        np.ascontiguousarray(arr).tofile(raw)
        written.append(raw)
        if npy:
            stem = safe_name(name)
            if stem in used:  # names differing only in unsafe characters must not overwrite
                stem = f"{stem}_{index}"
            used.add(stem)
            p = out_dir / f"{stem}.npy"
            np.save(p, arr)
            written.append(p)
    return written
