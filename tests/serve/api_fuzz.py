"""schemathesis against a live `qnnrt serve` on loopback: its CLI (`st run`, pinned in the test extra)
on the server's own /openapi.json, generated and mutated requests to every operation, every check
but positive_data_acceptance (a prompt longer than the context is a 400 that no schema can foresee;
tests/serve/test_requests.py holds the decoder to the document instead). The run is bounded by
`max_examples` per operation (and a timeout); its JSON report and HAR file (every request and answer)
go to `out`. Used by tests/serve/test_serve_fuzz.py and tools/fuzz_serve.py."""
from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHECKS = ["--checks", "all", "--exclude-checks", "positive_data_acceptance"]


@dataclass(frozen=True)
class FuzzRun:
    command: str                       # as run, the API key left out
    cases: int                         # test cases schemathesis generated and sent
    requests: int                      # HTTP requests made (a case may make several)
    statuses: dict[int, int]           # answers by status
    failures: list[Any]                # schemathesis's failures (the report's)
    errors: list[Any]
    exit_code: int
    seconds: float
    output: str                        # the CLI's own report (the failures, reproducible with curl)

    @property
    def server_errors(self) -> int:
        return sum(n for s, n in self.statuses.items() if s >= 500)

    def summary(self) -> str:
        by = ", ".join(f"{s}: {n}" for s, n in sorted(self.statuses.items()))
        return (f"{self.cases} cases ({self.requests} requests) in {self.seconds:.0f} s; answers {by}; "
                f"{len(self.failures)} failures, {len(self.errors)} errors, exit {self.exit_code}")


def run(base: str, api_key: str | None, out: Path, *, phases: str, max_examples: int, seed: int,
        timeout_s: float | None = None) -> FuzzRun:
    """One `st run`; `timeout_s` stops it (an AssertionError): schemathesis's own --max-time would
    instead repeat the fuzzing phase until the time is spent."""
    out.mkdir(parents=True, exist_ok=True)
    report, har = out / "schemathesis.json", out / "schemathesis.har"
    args = [f"{base}/openapi.json", *CHECKS, "--phases", phases, "--max-examples", str(max_examples),
            "--seed", str(seed), "--workers", "1", "--request-timeout", "300", "--report", "json,har",
            # schemathesis's default limit is 10 s a response: on a shared 2-core machine, a 16-choice
            # request on the simulator takes longer (a slow answer is not what this looks for)
            "--max-response-time", "300",
            "--report-json-path", str(report), "--report-har-path", str(har)]
    auth = ["-H", f"Authorization: Bearer {api_key}"] if api_key else []
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "schemathesis.cli", "run", *args, *auth], capture_output=True,
                       text=True, cwd=out, timeout=timeout_s)
    seconds = time.monotonic() - t0
    if not report.exists():
        raise AssertionError(f"schemathesis wrote no report (exit {r.returncode}): {r.stdout[-3000:]}{r.stderr}")
    rep = json.loads(report.read_text())
    entries = json.loads(har.read_text())["log"]["entries"] if har.exists() else []
    statuses = collections.Counter(int(e["response"]["status"]) for e in entries)
    return FuzzRun(command="st run " + " ".join(args) + (" -H 'Authorization: Bearer $KEY'" if auth else ""),
                   cases=rep["test_cases"]["generated"], requests=len(entries), statuses=dict(statuses),
                   failures=rep["failures"], errors=rep["errors"], exit_code=r.returncode, seconds=seconds,
                   output=r.stdout + r.stderr)
