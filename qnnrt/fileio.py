"""Every file qnnrt writes goes through here: checked before the work, written to a unique temp file
in the target folder, fsynced and renamed into place. A reader never sees half a file, a failure
(full disk, Ctrl-C) leaves neither a partial file nor the temp, and a symlink at the target is an
error, never followed."""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

from qnnrt.errors import FormatError, QnnrtError
from qnnrt.units import format_bytes


TEMP_TAG = "qnnrt"  # temp names: .<name>.qnnrt<pid>.<random>.tmp: whose they are is in the name


def remove_temps_of(pid: int, folders: Sequence[str | os.PathLike]) -> list[str]:
    """Remove the temp files process `pid` left in `folders` (it was killed mid-write). Only names
    this module made for that pid match, so no other file is ever touched."""
    import glob
    removed = []
    for d in folders:
        for p in glob.glob(os.path.join(glob.escape(os.fspath(d)), f".*.{TEMP_TAG}{pid}.*.tmp")):
            try:
                if not os.path.islink(p):
                    os.unlink(p)
                    removed.append(p)
            except OSError:
                pass
    return removed


def owned_prefix(kind: str) -> str:
    """A temp name prefix that says whose it is (`kind` + this pid + '-'): `remove_stale_temps`
    can then tell the leftovers of a dead process (SIGKILL, OOM) from a live one's."""
    return f"{kind}{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True          # someone else's, or cannot tell: keep
    return True


def remove_stale_temps(folder: str | os.PathLike, kind: str) -> list[str]:
    """Remove what a dead process left in `folder` under `owned_prefix(kind)` names (files and
    folders; links never followed). A live process's, or a name without a pid, is kept."""
    import re
    import shutil
    removed: list[str] = []
    pattern = re.compile(re.escape(kind) + r"(\d+)-")
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        m = pattern.match(name)
        if m is None or int(m.group(1)) == os.getpid() or _alive(int(m.group(1))):
            continue
        p = os.path.join(os.fspath(folder), name)
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
            removed.append(p)
        except OSError:
            pass
    return removed


def default_cache_dir() -> Path:
    """The user cache folder: $QNNRT_CACHE_DIR, else $XDG_CACHE_HOME/qnnrt, else ~/.cache/qnnrt."""
    env = os.environ.get("QNNRT_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "qnnrt"


def check_output_path(path: str | os.PathLike, what: str = "output") -> str:
    """Absolute `path` if a file can be written there, else QnnrtError saying what to do.

    Called up front by the commands so a bad path fails before a long run, and again before writing.
    """
    if not path or not str(path).strip():
        raise QnnrtError(f"no path given for the {what} file: pass a file name, e.g. heap.txt")
    if "\0" in os.fspath(path):
        raise QnnrtError(f"cannot write the {what} to {str(path)!r}: the path contains a NUL byte")
    full = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(full)
    if os.path.islink(full):
        raise QnnrtError(f"cannot write the {what} to {str(path)!r}: it is a symbolic link; qnnrt never "
                         f"writes through links. Remove the link or choose another path.")
    if os.path.isdir(full):
        raise QnnrtError(f"cannot write the {what} to {str(path)!r}: it is a directory. "
                         f"Pass a file path, e.g. {os.path.join(path, 'out.txt')!r}.")
    if not os.path.exists(directory):
        raise QnnrtError(f"cannot write the {what} to {str(path)!r}: directory {directory!r} does not "
                         f"exist. Create it first (mkdir -p {directory}) or choose another path.")
    if not os.path.isdir(directory):
        raise QnnrtError(f"cannot write the {what} to {str(path)!r}: {directory!r} is not a directory. "
                         f"Choose a path inside an existing directory.")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise QnnrtError(f"cannot write the {what} to {str(path)!r}: directory {directory!r} is not "
                         f"writable by this user. Choose a writable directory.")
    return full


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_current_umask()  # what open() would give; mkstemp's 0600 is for the temp only
MIN_FREE_BYTES = 64 * 1024  # a target folder with less free space than this fails the check up front


def free_bytes(directory: str | os.PathLike) -> int | None:
    """Bytes free for this user in `directory`'s file system (None where it cannot be told)."""
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def _probe_writable(directory: str, what: str, shown: str) -> None:
    """Create and remove an exclusive temp file: the truth about writability, also for root on a
    read-only mount, where permission bits say nothing."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".qnnrt-probe.", dir=directory)
    except OSError as e:
        raise QnnrtError(f"cannot write the {what} to {shown!r}: {e.strerror or e} in {directory!r}. "
                         f"Choose a writable directory.") from e
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass


def check_free_space(directory: str | os.PathLike, need: int, what: str = "output") -> None:
    """QnnrtError unless `directory` has `need` bytes (at least MIN_FREE_BYTES) free."""
    free = free_bytes(directory)
    need = max(int(need), MIN_FREE_BYTES)
    if free is not None and free < need:
        raise QnnrtError(f"cannot write the {what} to {os.fspath(directory)!r}: {format_bytes(free)} free "
                         f"there, {format_bytes(need)} needed. Free some space or choose another path.")


def check_writable(path: str | os.PathLike, what: str = "output", need: int = 0) -> str:
    """`check_output_path` plus a real write probe in the folder and a free-space check: for the
    checks before the work (a bad target never costs a load or a run)."""
    full = check_output_path(path, what)
    directory = os.path.dirname(full)
    _probe_writable(directory, what, str(path))
    check_free_space(directory, need, what)
    return full


def check_output_dir(path: str | os.PathLike, what: str = "outputs", need: int = 0) -> str:
    """The absolute folder `path` (created if missing) if files can be written in it, else
    QnnrtError: writable (probed), with free space."""
    if not path or not str(path).strip() or "\0" in os.fspath(path):
        raise QnnrtError(f"no usable folder given for the {what}: {str(path)!r}")
    full = os.path.abspath(os.fspath(path))
    if os.path.exists(full) and not os.path.isdir(full):
        raise QnnrtError(f"cannot write the {what} to {str(path)!r}: it exists and is not a directory")
    try:
        os.makedirs(full, exist_ok=True)
    except OSError as e:
        raise QnnrtError(f"cannot create the {what} folder {str(path)!r}: {e.strerror or e}") from e
    _probe_writable(full, what, str(path))
    check_free_space(full, need, what)
    return full


Chunks = Union[str, bytes, bytearray, memoryview, Sequence[Union[bytes, bytearray, memoryview]]]


def write_atomic(path: str | os.PathLike, data: Chunks, what: str = "output", durable: bool = True) -> str:
    """Write `data` (text is UTF-8; or a sequence of byte chunks) to `path` through an exclusive,
    uniquely named temp file in the same folder (O_EXCL | O_NOFOLLOW) and a rename.

    Every byte is checked written: a short write or ENOSPC is an error naming the path and how much
    was written, and the temp file is removed (it is exclusive and unique, so it never replaces or
    deletes a file of the user's). A symbolic link at `path` is an error, never followed. `durable`
    fsyncs before the rename (reports; per-iteration outputs skip it: still never half a file)."""
    full = check_output_path(path, what)
    if isinstance(data, str):
        chunks: Sequence = [data.encode("utf-8")]
    elif isinstance(data, (bytes, bytearray, memoryview)):
        chunks = [data]
    else:
        chunks = data
    views = [memoryview(c).cast("B") if memoryview(c).ndim != 1 or memoryview(c).format != "B"
             else memoryview(c) for c in chunks]
    total = sum(v.nbytes for v in views)
    directory = os.path.dirname(full)
    prefix = f".{os.path.basename(full)}.{TEMP_TAG}{os.getpid()}."
    tmp = None
    done = 0
    try:
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, _FILE_MODE)
            for view in views:
                at = 0
                while at < view.nbytes:
                    n = os.write(fd, view[at:])
                    if n <= 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    at += n
                    done += n
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if os.path.islink(full):
            raise QnnrtError(f"cannot write the {what} to {str(path)!r}: a symbolic link appeared "
                             f"there while writing; not followed")
        os.replace(tmp, full)
        tmp = None
    except OSError as e:
        full_disk = e.errno in (errno.ENOSPC, errno.EDQUOT)
        raise QnnrtError(f"cannot write the {what} to {str(path)!r}: {e.strerror or e} after "
                         f"{format_bytes(done)} of {format_bytes(total)}; nothing was written there"
                         + (". The disk is full: free some space or choose another path." if full_disk
                            else ". Check that the directory is writable and has free space.")) from e
    except BaseException:
        if tmp is None:     # stopped inside mkstemp (a stop signal): the file may exist unnamed here
            _remove_temps_named(directory, prefix)
        raise
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return full


def _remove_temps_named(directory: str, prefix: str) -> None:
    """Remove this process's temp files for one path (`prefix` holds the name and the pid)."""
    import glob
    for p in glob.glob(os.path.join(glob.escape(directory), glob.escape(prefix) + "*.tmp")):
        try:
            if not os.path.islink(p):
                os.unlink(p)
        except OSError:
            pass


def write_array(path: str | os.PathLike, arr: Any, npy: bool | None = None, what: str = "output",
                durable: bool = False) -> str:
    """Write a numpy array atomically: raw C-order bytes, or .npy (header + data) when `npy` (by
    default: when the path ends in .npy). Same guarantees as `write_atomic`."""
    import io

    import numpy as np
    a = np.ascontiguousarray(arr)
    if npy is None:
        npy = os.fspath(path).endswith(".npy")
    if a.dtype.hasobject:
        raise QnnrtError(f"cannot write the {what} to {str(path)!r}: object arrays are not written")
    data = a.reshape(-1).view(np.uint8).data if a.size else memoryview(b"")
    if not npy:
        return write_atomic(path, [data], what, durable)
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, np.lib.format.header_data_from_array_1_0(a))
    return write_atomic(path, [head.getvalue(), data], what, durable)


# --- reading JSON written by someone else: bounded size, depth and numbers ---------------------

JSON_MAX_BYTES = 64 << 20      # a manifest or report is kilobytes; refuse anything absurd
JSON_MAX_DEPTH = 64            # program.json nests 3 deep; json's recursion dies near 1,000
JSON_MAX_NUMBER_CHARS = 40     # an int64 has 20 characters; 5,000-digit numbers are refused


def _json_depth_error(text: str, max_depth: int) -> tuple[int, int] | None:
    """(depth, offset) where `text` nests deeper than `max_depth` (strings skipped), else None."""
    import re
    depth = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text, flags=re.DOTALL):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > max_depth:
                return depth, m.start()
        elif c in "]}":
            depth -= 1
    return None


def loads_json(text: str | bytes, where: str, *, max_depth: int = JSON_MAX_DEPTH,
               max_number_chars: int = JSON_MAX_NUMBER_CHARS, max_bytes: int = JSON_MAX_BYTES):
    """Decode JSON from an untrusted file with limits; any problem is a FormatError naming `where`.

    The one JSON reader of qnnrt: depth (no RecursionError), number length (no 5,000-digit int
    conversions), size, UTF-8, and no NaN/Infinity constants."""
    import json
    import math
    if len(text) > max_bytes:
        raise FormatError(f"{where}: {len(text)} bytes is more than the {max_bytes} a JSON file of "
                          f"qnnrt may have; this is not a file qnnrt wrote. Restore or rebuild it.")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"{where}: not UTF-8 text (byte {e.start}: {e.reason}). Restore the "
                              f"file or rebuild it.") from None
    deep = _json_depth_error(text, max_depth)
    if deep is not None:
        raise FormatError(f"{where}: JSON nested deeper than {max_depth} levels (character "
                          f"{deep[1]}); this is not a file qnnrt wrote. Restore or rebuild it.")

    def number(kind):
        def parse(s: str):
            if len(s) > max_number_chars:
                raise FormatError(f"{where}: a number of {len(s)} characters ({s[:12]}...) is "
                                  f"longer than the {max_number_chars} allowed. Restore or rebuild "
                                  f"the file.")
            value = kind(s)
            if kind is float and not math.isfinite(value):
                raise FormatError(f"{where}: the number {s} is out of range. Restore or rebuild "
                                  f"the file.")
            return value
        return parse

    def constant(s: str):
        raise FormatError(f"{where}: {s} is not valid JSON. Restore or rebuild the file.")
    try:
        return json.loads(text, parse_int=number(int), parse_float=number(float),
                          parse_constant=constant)
    except json.JSONDecodeError as e:
        raise FormatError(f"{where}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}). "
                          "Restore the file or rebuild it.") from None
    except RecursionError:
        raise FormatError(f"{where}: JSON nested too deeply. Restore or rebuild the file.") from None
    except ValueError as e:  # int() limits, surrogates ...
        raise FormatError(f"{where}: unreadable JSON value ({e}). Restore or rebuild it.") from None


def read_json(path: str | os.PathLike, what: str = "JSON file", **limits):
    """`loads_json` of a file: size checked before reading; OSError becomes a FormatError."""
    p = os.fspath(path)
    return loads_json(read_bytes(p, what, limits.get("max_bytes", JSON_MAX_BYTES)), p, **limits)


TEXT_MAX_BYTES = 16 << 20     # a chat template or prompt file is kilobytes


def read_bytes(path: str | os.PathLike, what: str, max_bytes: int) -> bytes:
    """A file's bytes, its size checked before reading (and the read capped: it may grow); any
    problem is a FormatError naming the file."""
    p = os.fspath(path)
    try:
        size = os.stat(p).st_size
        if size > max_bytes:
            raise FormatError(f"{p}: the {what} is {size} bytes, more than the {max_bytes} allowed; "
                              f"this is not a {what} of a model qnnrt can use.")
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise FormatError(f"{p}: cannot read the {what}: {e.strerror or e}") from None
    if len(data) > max_bytes:
        raise FormatError(f"{p}: the {what} grew past the {max_bytes} bytes allowed while it was read")
    return data


def read_text(path: str | os.PathLike, what: str = "text file", max_bytes: int = TEXT_MAX_BYTES) -> str:
    """A UTF-8 text file (a chat template, a prompt), bounded like `read_json`; not UTF-8 is a
    FormatError naming the file and the byte."""
    data = read_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"{os.fspath(path)}: the {what} is not UTF-8 text (byte {e.start}: {e.reason}); "
                          f"save it as UTF-8.") from None


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def buffer_sha256(buffer) -> str:
    """Hex sha256 of a bytes-like object (e.g. a mapped context binary), without copying it."""
    import hashlib
    return hashlib.sha256(memoryview(buffer).cast("B")).hexdigest()
