"""Many short requests to a live `qnnrt serve`, with the serving process's RSS, open file descriptors
and threads read from /proc between them (Linux). Used by tests/serve/test_serve_load.py (~200
requests) and bench/serve_soak.py (2,000, the table in docs/RELIABILITY.md)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx


@dataclass(frozen=True)
class Sample:
    requests: int
    seconds: float
    rss_mb: float
    fds: int
    threads: int


def read_process(pid: int) -> tuple[float, int, int]:
    """(VmRSS in MB, open fds, threads) of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kb = int(fields["VmRSS"].split()[0])
    return rss_kb / 1024, len(list(Path(f"/proc/{pid}/fd").iterdir())), int(fields["Threads"])


def mix(model: str, embeddings: str | None) -> list[tuple[str, dict[str, Any], int]]:
    """The requests a soak cycles through: (path, body, the status it must get). max_tokens 1-2."""
    hi = [{"role": "user", "content": "Once upon a time"}]
    out = [("/v1/chat/completions", {"model": model, "messages": hi, "max_tokens": 1}, 200),
           ("/v1/chat/completions", {"model": model, "messages": hi, "max_tokens": 2, "stream": True,
                                     "stream_options": {"include_usage": True}, "logprobs": True,
                                     "top_logprobs": 2}, 200),
           ("/v1/completions", {"model": model, "prompt": "The dog", "max_tokens": 2, "logprobs": 1,
                                "temperature": 0.8, "seed": 3}, 200),
           ("/v1/completions", {"model": model, "prompt": [1, 5, 9], "max_tokens": 1, "stream": True}, 200),
           ("/v1/chat/completions", {"model": model, "messages": hi, "temperature": 9}, 400),
           ("/v1/completions", {"model": "nope", "prompt": "x"}, 404)]
    if embeddings is not None:
        out.append(("/v1/embeddings", {"model": embeddings, "input": ["a cat", "a dog"]}, 200))
    return out


def soak(base: str, headers: dict[str, str], pid: int, *, requests: int, every: int, model: str,
         embeddings: str | None = None) -> list[Sample]:
    """`requests` requests over one keep-alive connection, a sample every `every` (and one before)."""
    plan = mix(model, embeddings)
    samples = [Sample(0, 0.0, *read_process(pid))]
    t0 = time.monotonic()
    with httpx.Client(base_url=base, headers=headers, timeout=600) as c:
        for i in range(requests):
            path, body, status = plan[i % len(plan)]
            r = c.post(path, json=body)
            assert r.status_code == status, (i, path, r.status_code, r.text[:500])
            if body.get("stream") and status == 200:
                assert r.text.rstrip().endswith("data: [DONE]"), r.text[-300:]
            if (i + 1) % every == 0:
                samples.append(Sample(i + 1, time.monotonic() - t0, *read_process(pid)))
    return samples


def table(samples: list[Sample]) -> str:
    rows = ["| requests | seconds | RSS MB | fds | threads |", "| --- | --- | --- | --- | --- |"]
    rows += [f"| {s.requests} | {s.seconds:.0f} | {s.rss_mb:.1f} | {s.fds} | {s.threads} |" for s in samples]
    return "\n".join(rows)
