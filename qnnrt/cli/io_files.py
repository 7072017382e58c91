"""Reading inputs (.npy, .raw, QNN input lists) and writing outputs (.npy + ExecuTorch-style .raw)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from qnnrt.errors import FormatError, InputError
from qnnrt.fileio import read_text, write_array
from qnnrt.runtime.method_spec import IOSpec
from qnnrt.units import format_bytes, parse_size

MAX_INPUT_ENV = "QNNRT_MAX_INPUT_BYTES"
MAX_INPUT_RAM_FRACTION = 0.25   # default bound of one inference's inputs: a quarter of the RAM
_limit: int | None = None       # set by the command (--max-input-bytes), else env / default


def physical_ram() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # Windows has no sysconf
        return None


def max_input_bytes() -> int:
    """The most one inference's inputs may take: --max-input-bytes, else QNNRT_MAX_INPUT_BYTES,
    else a quarter of the RAM (4 GiB where the RAM size is unknown)."""
    if _limit is not None:
        return _limit
    env = os.environ.get(MAX_INPUT_ENV)
    if env:
        return parse_size(env, MAX_INPUT_ENV)
    ram = physical_ram()
    return int(ram * MAX_INPUT_RAM_FRACTION) if ram else 4 << 30


def set_max_input_bytes(text: str | int | None) -> None:
    global _limit
    _limit = None if text is None else parse_size(text, "--max-input-bytes")


def check_input_bytes(name: str, shape, dtype, already: int = 0) -> int:
    """The bytes input `name` takes; InputError before any allocation if it (with `already`
    bytes of the same inference) exceeds max_input_bytes()."""
    count = 1
    for d in shape:
        count *= int(d if d is not None else 1)
    need = count * np.dtype(dtype).itemsize
    limit = max_input_bytes()
    if need + already > limit:
        raise InputError(f"input {name!r} {tuple(shape)} {np.dtype(dtype)} would take {format_bytes(need)}"
                         + (f" (inputs of this inference {format_bytes(need + already)})" if already else "")
                         + f", over the input limit of {format_bytes(limit)}; refused before "
                         f"allocating. If the shape is right, raise the limit with --max-input-bytes or "
                         f"{MAX_INPUT_ENV}; else the binary's tensor info is damaged: rebuild it.")
    return need


def _read_raw(path: Path, spec: IOSpec) -> np.ndarray:
    if any(d is None for d in spec.shape):
        raise InputError(f"{path}: input {spec.name!r} has a free dimension {spec.shape}; give "
                         f"it as .npy so its shape is known")
    count = int(np.prod(spec.shape, dtype=np.int64))
    size = path.stat().st_size
    check_input_bytes(spec.name, spec.shape, spec.dtype if size != count * 4 else np.float32)
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
            with open(path, "rb") as f:  # the header first: a huge claimed shape is never allocated
                version = np.lib.format.read_magic(f)
                reader = {(1, 0): np.lib.format.read_array_header_1_0,
                          (2, 0): np.lib.format.read_array_header_2_0}.get(version)
                header = reader(f) if reader else None
            if header is not None:
                check_input_bytes(spec.name, header[0], header[2])
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
    try:
        text = read_text(path, "input list")
    except FormatError as e:
        raise InputError(str(e)) from None
    for lineno, line in enumerate(text.splitlines(), 1):
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
    total = 0
    for s in specs:  # every size checked before anything is allocated
        made = np.float32 if s.is_fixed_point else (bool if s.dtype.kind == "b" else s.dtype)
        total += check_input_bytes(s.name, s.shape, made, total)
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


def output_bytes(outputs) -> int:
    """Bytes one iteration's outputs take on disk (raw), from specs or arrays (a lower bound)."""
    total = 0
    for o in outputs:
        shape = getattr(o, "shape", ())
        n = 1
        for d in shape:
            n *= int(d if d is not None else 1)
        dtype = np.float32 if getattr(o, "is_fixed_point", False) else o.dtype
        total += n * np.dtype(dtype).itemsize
    return total


def write_outputs(out_dir: Path, iteration: int, outputs: dict[str, np.ndarray],
                  npy: bool) -> list[Path]:
    """output_<iteration>_<index>.raw per output (and <name>.npy when `npy`), each written
    atomically through qnnrt.fileio: never through a link, never half a file; a full disk stops
    at the first failed write with its path."""
    if not out_dir.is_dir():
        out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    used: set[str] = set()
    for index, (name, arr) in enumerate(outputs.items()):
        raw = out_dir / f"output_{iteration}_{index}.raw"
        write_array(raw, arr, npy=False, what=f"output {name!r}")
        written.append(raw)
        if npy:
            stem = safe_name(name)
            if stem in used:  # names differing only in unsafe characters must not overwrite
                stem = f"{stem}_{index}"
            used.add(stem)
            p = out_dir / f"{stem}.npy"
            write_array(p, arr, npy=True, what=f"output {name!r}")
            written.append(p)
    return written


__all__ = ["read_array", "parse_inputs_arg", "read_input_list", "random_inputs", "write_outputs",
           "safe_name", "max_input_bytes", "set_max_input_bytes", "check_input_bytes", "output_bytes"]
