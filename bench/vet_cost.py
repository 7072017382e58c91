"""Cost of vetting (by hand; results in docs/RELIABILITY.md, "Vetting cost").

  python bench/vet_cost.py ARTIFACT [ARTIFACT ...]

For each artifact: load time with vet=False, with vetting on a fresh cache (cold: one child), and
again with the verdicts cached (warm); plus the child's own wall time and the binaries vetted."""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import qnnrt


def load_s(path: str, vet) -> tuple[float, list]:
    t0 = time.perf_counter()
    prog = qnnrt.load(path, options=qnnrt.LoadOptions(vet=vet))
    dt = time.perf_counter() - t0
    reports = prog.vet_reports
    prog.close()
    return dt, reports


def main() -> int:
    print(f"{'artifact':48} {'binaries':>8} {'no vet':>8} {'cold':>8} {'child':>8} {'warm':>8} "
          f"{'create-only cold':>16}")
    for path in sys.argv[1:]:
        os.environ["QNNRT_CACHE_DIR"] = tempfile.mkdtemp(prefix="qnnrt-vetcost-")
        load_s(path, False)  # libraries loaded, files in the page cache
        off = min(load_s(path, False)[0] for _ in range(3))
        cold, reps = load_s(path, True)
        child = sum(r.child_seconds for r in reps)
        n = sum(len(r.results) for r in reps)
        warm = min(load_s(path, True)[0] for _ in range(3))
        os.environ["QNNRT_CACHE_DIR"] = tempfile.mkdtemp(prefix="qnnrt-vetcost-")
        create_only, _ = load_s(path, "create")
        name = path if len(path) <= 48 else "..." + path[-45:]
        print(f"{name:48} {n:8} {off:8.3f} {cold:8.3f} {child:8.3f} {warm:8.3f} {create_only:16.3f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
