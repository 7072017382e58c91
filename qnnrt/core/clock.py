"""The one clock a run's trace reads in every process: time.monotonic_ns, CLOCK_MONOTONIC on Linux
(mach_absolute_time on macOS, QueryPerformanceCounter on Windows), each system-wide, so a PD
worker's timestamps line up with the main process's (time.perf_counter_ns is not system-wide on
every OS). The binders read it when a graph call is observed; profiling/trace.py everywhere else."""
from __future__ import annotations

import time

CLOCK = time.monotonic_ns
CLOCK_NOTE = ("time.monotonic_ns (CLOCK_MONOTONIC on Linux): one system-wide clock for this process "
              "and every PD worker")
