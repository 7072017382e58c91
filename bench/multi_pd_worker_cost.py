"""What a PD worker costs: load time and resident memory of the main process and of each worker,
the `tiny` demo forced over 2, 3 and 4 PDs.

    python bench/multi_pd_worker_cost.py
"""
from __future__ import annotations

import os
import sys
import time

import qnnrt

sys.path.insert(0, os.path.dirname(__file__))
from bench_multi_pd import _feeds


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def main() -> None:
    tiny = os.path.expanduser("~/.cache/qnnrt/demo/tiny")
    for n in (2, 3, 4):
        t0 = time.perf_counter()
        opts = qnnrt.LoadOptions(pd_budget="1GiB")
        with qnnrt.load(tiny, residency=f"multi-pd:{n}", options=opts) as p:
            load = time.perf_counter() - t0
            m = p.method(None)
            p.run(m.name, _feeds(m))
            pds = p.pool.summary()["pd_workers"]
            print(f"{n} PDs: load {load:.2f} s; RSS MiB main {rss_mib(os.getpid()):.0f}, workers "
                  f"{[round(rss_mib(w['pid'])) for w in pds[1:]]}, contexts "
                  f"{[w['contexts'] for w in pds]}")


if __name__ == "__main__":
    main()
