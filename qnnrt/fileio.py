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
from typing import Any, Union

from qnnrt.errors import QnnrtError
from qnnrt.units import format_bytes


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
    tmp = None
    done = 0
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(full) + ".", suffix=".tmp", dir=directory)
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
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return full


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
