"""Drive qnnrt's QNN log callback from a C library that calls it the way QNN does (with a va_list),
and check the formatted messages. Used by tests/abi/test_log_callback.py (host, system cc) and by
tools/aarch64_check.sh (inside the arm64 chroot, library cross-compiled for aarch64).

    python logcb_check.py path/to/libfake_qnn_log.so [fake_qnn_log.c]   # exit 0 when all match
"""
from __future__ import annotations

import ctypes as C
import shutil
import subprocess
import sys
from pathlib import Path

# tests/data/fake_qnn_log.c in the repo; beside this file where the check copies both
HERE = Path(__file__).resolve().parent
SOURCE = next((p for p in (HERE / "fake_qnn_log.c", HERE.parent / "data" / "fake_qnn_log.c") if p.exists()),
              HERE.parent / "data" / "fake_qnn_log.c")

# (level, expected text) of fake_emit(i)
EXPECTED = [
    (1, "int 42 neg -7 hex ff"),
    (2, "str <htp> <v73   |  ctx>"),
    (3, "size_t 1234567890123 bytes, deadbeef"),
    (4, "double 3.142 0.5 1.234568e+04"),
    (5, "mixed ctx=-1 (7) 2.50 4000000000 18446744073709551615 x%"),
    (3, "many 1 2 3 4 5 6 7 8 9 | 1.5 2.5 3.5 4.5 5.5 6.5 7.5 8.5 9.5 10.5 | end 99"),
    (2, "no args at all"),
]


def compile_library(out: Path, cc: str | None = None) -> Path:
    """Build fake_qnn_log.c into a shared library with `cc` (default: $CC, cc, gcc, clang)."""
    cc = cc or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if cc is None:
        raise FileNotFoundError("no C compiler (cc, gcc or clang) on PATH")
    cmd = [cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(SOURCE)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def run(lib_path: str | Path) -> list[tuple[int, str, int, str]]:
    """[(expected level, expected text, got level, got text)] for every case."""
    from qnnrt._capi.log import make_log_callback
    lib = C.CDLL(str(lib_path))
    got: list[tuple[int, str]] = []
    cb = make_log_callback(lambda level, text: got.append((level, text)))
    lib.fake_register.argtypes = [C.c_void_p]
    lib.fake_register(C.cast(cb, C.c_void_p))
    n = lib.fake_num_cases()
    assert n == len(EXPECTED), (n, len(EXPECTED))
    out = []
    for i, (lvl, text) in enumerate(EXPECTED):
        got.clear()
        assert lib.fake_emit(i) == 0
        g = got[0] if got else (-1, "<no callback>")
        out.append((lvl, text, g[0], g[1]))
    lib.fake_register(None)
    return out


def main(argv: list[str]) -> int:
    from qnnrt._capi import libc
    print(f"formatter: {libc.FORMATTER.name if libc.FORMATTER else None}")
    bad = 0
    for lvl, text, glvl, gtext in run(argv[1]):
        ok = (lvl, text) == (glvl, gtext)
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} level {glvl}: {gtext!r}" + ("" if ok else f" (expected {lvl}: {text!r})"))
    print(f"{len(EXPECTED) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
