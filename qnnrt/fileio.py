"""Every file qnnrt writes goes through here: checked before the work, written to a unique temp file
in the target folder, fsynced and renamed into place. A reader never sees half a file, a failure
(full disk, Ctrl-C) leaves neither a partial file nor the temp, and a symlink at the target is an
error, never followed."""
from __future__ import annotations

import os
import tempfile

from qnnrt.errors import QnnrtError


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


def write_atomic(path: str | os.PathLike, data: str | bytes | memoryview, what: str = "output") -> str:
    """Write `data` (text is UTF-8) to `path` through a temp file in the same folder and a rename.

    Every byte is checked written (a short write or ENOSPC is an error naming the path), and the temp
    file is exclusive and unique, so it never replaces or deletes a file of the user's."""
    full = check_output_path(path, what)
    payload = data.encode("utf-8") if isinstance(data, str) else memoryview(data).cast("B")
    directory = os.path.dirname(full)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(full) + ".", suffix=".tmp", dir=directory)
        try:
            view, done = memoryview(payload), 0
            while done < len(view):
                n = os.write(fd, view[done:])
                if n <= 0:
                    raise OSError(28, "no space left on device")
                done += n
            os.fsync(fd)
        finally:
            os.close(fd)
        if os.path.islink(full):
            raise QnnrtError(f"cannot write the {what} to {str(path)!r}: a symbolic link appeared "
                             f"there while writing; not followed")
        os.replace(tmp, full)
        tmp = None
    except OSError as e:
        raise QnnrtError(f"cannot write the {what} to {str(path)!r}: {e.strerror or e}; nothing was "
                         f"written there. Check that the directory is writable and has free space.") from e
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return full
