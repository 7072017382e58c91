"""Soak and lifetime figures (by hand; results in docs/RELIABILITY.md).

  python bench/soak.py iterations PROGRAM -n 10000      # one process, RSS / fds every 1/10 of n
  python bench/soak.py loadclose PROGRAM -n 500          # load + one run + close, n times
  python bench/soak.py failed PROGRAM --corrupt 5        # eager load failing at binary 5, twice,
                                                         # then a good load: counts vs baseline
  python bench/soak.py pd PD_PROGRAM                     # eager PD exhaustion, twice, then a good load

RSS from /proc/self/status (VmRSS), fds from /proc/self/fd, threads from /proc/self/task (native
threads included)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import qnnrt
from qnnrt.errors import QnnrtError


def counts() -> dict:
    rss = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return {"rss_mb": round(rss / 2**20, 2), "fds": len(os.listdir("/proc/self/fd")),
            "threads": len(os.listdir("/proc/self/task"))}


def inputs_of(m, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {s.name: rng.standard_normal(s.shape).astype(s.dtype) for s in m.inputs}


def per_1000(samples: list[tuple[int, dict]], key: str, skip: int) -> float:
    """Growth of `key` per 1,000 iterations, by least squares over samples after the first `skip`."""
    pts = [(i, c[key]) for i, c in samples if i >= skip]
    if len(pts) < 2:
        return 0.0
    x, y = np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float)
    return float(np.polyfit(x, y, 1)[0] * 1000)


def soak_iterations(path: str, n: int, residency: str) -> dict:
    prog = qnnrt.load(path, residency=residency)
    m = prog.method()
    x = inputs_of(m)
    ref = prog.run(m.name, x)
    samples, same, t0 = [(0, counts())], True, time.perf_counter()
    step = max(1, n // 10)
    for i in range(1, n + 1):
        out = prog.run(m.name, x)
        same = same and all(np.array_equal(out[k], ref[k]) for k in ref)
        if i % step == 0:
            samples.append((i, counts()))
            print(f"  {i}/{n}: {samples[-1]} {time.perf_counter() - t0:.0f} s", flush=True)
    summary = prog.pool.summary()
    prog.close()
    skip = step  # the first tenth warms allocators up
    return {"mode": "iterations", "path": path, "n": n, "residency": residency, "identical": same,
            "seconds": round(time.perf_counter() - t0, 1), "samples": samples,
            "rss_mb_per_1000": round(per_1000(samples, "rss_mb", skip), 3),
            "fds_per_1000": round(per_1000(samples, "fds", skip), 3),
            "creates": summary["creates"], "after_close": counts()}


def soak_loadclose(path: str, n: int, residency: str) -> dict:
    samples, t0 = [(0, counts())], time.perf_counter()
    step = max(1, n // 10)
    ref = None
    same = True
    for i in range(1, n + 1):
        with qnnrt.load(path, residency=residency) as prog:
            m = prog.method()
            out = prog.run(m.name, inputs_of(m))
            ref = ref or out
            same = same and all(np.array_equal(out[k], ref[k]) for k in ref)
        if i % step == 0:
            samples.append((i, counts()))
            print(f"  {i}/{n}: {samples[-1]} {time.perf_counter() - t0:.0f} s", flush=True)
    return {"mode": "loadclose", "path": path, "n": n, "identical": same,
            "seconds": round(time.perf_counter() - t0, 1), "samples": samples,
            "rss_mb_per_1000": round(per_1000(samples, "rss_mb", step), 3),
            "fds_per_1000": round(per_1000(samples, "fds", step), 3),
            "threads_per_1000": round(per_1000(samples, "threads", step), 3)}


def soak_pd(path: str, repeats: int) -> dict:
    """Eager loads of a program too large for the PD budget (the `pd` demo) fail with PD exhaustion;
    counts after each against a baseline, then a load under `auto` runs once."""
    with qnnrt.load(path, residency="sequential") as prog:  # warm-up
        pass
    base = counts()
    errors, after = [], []
    for _ in range(repeats):
        try:
            qnnrt.load(path, residency="eager").close()
            errors.append("loaded?!")
        except QnnrtError as e:
            errors.append(str(e).splitlines()[0][:160])
        after.append(counts())
    t0 = time.perf_counter()
    with qnnrt.load(path, residency="auto") as prog:
        prog.run(prog.method().name, inputs_of(prog.method()))
    return {"mode": "pd", "path": path, "baseline": base, "after_each_failure": after,
            "after_good_load": counts(), "good_run_s": round(time.perf_counter() - t0, 1),
            "errors": errors}


def soak_failed(path: str, corrupt: int, repeats: int) -> dict:
    """A program copy whose binary `corrupt` has 64 bytes inverted in its middle (manifest sha256
    updated, so it reaches QNN: its binary info reads, contextCreateFromBinary rejects it with 5005),
    loaded eager: contexts 0..corrupt-1 are created first."""
    from qnnrt.fileio import file_sha256
    tmp = Path(tempfile.mkdtemp(prefix="qnnrt-soak-"))
    bad = Path(shutil.copytree(path, tmp / "bad"))
    man = json.loads((bad / "program.json").read_text())
    ctx = man["contexts"][corrupt]
    f = bad / ctx["path"]
    d = bytearray(f.read_bytes())
    mid = len(d) // 2
    d[mid:mid + 64] = bytes(b ^ 0xFF for b in d[mid:mid + 64])
    f.write_bytes(d)
    ctx["size"], ctx["sha256"] = f.stat().st_size, file_sha256(f)
    (bad / "program.json").write_text(json.dumps(man))
    # warm-up: one good load so libraries and caches are in place before the baseline
    with qnnrt.load(path, residency="eager") as prog:
        prog.run(prog.method().name, inputs_of(prog.method()))
    base = counts()
    errors = []
    after = []
    for _ in range(repeats):
        try:
            qnnrt.load(bad, residency="eager", options=qnnrt.LoadOptions(vet=False)).close()
            errors.append("loaded?!")
        except QnnrtError as e:
            errors.append(str(e).splitlines()[0][:200])
        after.append(counts())
    with qnnrt.load(path, residency="eager") as prog:
        prog.run(prog.method().name, inputs_of(prog.method()))
        ok = True
    final = counts()
    shutil.rmtree(tmp, ignore_errors=True)
    return {"mode": "failed", "path": path, "corrupt_index": corrupt, "baseline": base,
            "after_each_failure": after, "after_good_load": final, "second_load_ok": ok,
            "errors": errors}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["iterations", "loadclose", "failed", "pd"])
    ap.add_argument("path")
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--residency", default="auto")
    ap.add_argument("--corrupt", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="append the result here")
    a = ap.parse_args()
    if a.mode == "iterations":
        r = soak_iterations(a.path, a.n, a.residency)
    elif a.mode == "loadclose":
        r = soak_loadclose(a.path, a.n, a.residency)
    elif a.mode == "pd":
        r = soak_pd(a.path, a.repeats)
    else:
        r = soak_failed(a.path, a.corrupt, a.repeats)
    text = json.dumps(r)
    print(text)
    if a.json:
        with open(a.json, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
