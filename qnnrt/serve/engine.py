"""One model, many clients: a FIFO of generation jobs in front of a single model instance, run on
one thread. The HTTP side submits jobs and receives their events through a callback; it never
touches the model."""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import numpy as np

from qnnrt.errors import QnnrtError
from qnnrt.llm.embedding import EmbedInput, EmbeddingModel
from qnnrt.llm.errors import ContextLengthError
from qnnrt.llm.grammar import Grammar
from qnnrt.llm.sampling import Sampler, SamplingOptions, TokenConstraint, log_softmax
from qnnrt.llm.session import CachedGenerator
from qnnrt.llm.speculative import verify_token
from qnnrt.llm.text import TextModel
from qnnrt.llm.textgen import TextGeneration, generate_text
from qnnrt.llm.tracing import TracedConstraint, Tracing

log = logging.getLogger("qnnrt.serve")


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: list[tuple[int, float]]       # the best ids and their log-probabilities, best first


@dataclass(frozen=True)
class TextEvent:
    text: str                          # may be "" (a token whose text is held back or cut)
    token: int | None = None           # None: text released at the end, not a new token
    logprob: TokenLogprob | None = None
    index: int = 0                     # the choice


@dataclass(frozen=True)
class ChoiceEvent:
    """A choice ended."""
    index: int
    finish_reason: str                 # "stop" | "length"
    completion_tokens: int


@dataclass(frozen=True)
class DoneEvent:
    """Every choice ended: the request's usage (the prompt counted once, as OpenAI does)."""
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@dataclass(frozen=True)
class ErrorEvent:
    status: int
    message: str
    code: str


@dataclass(frozen=True)
class EmbeddingsEvent:
    vectors: list[np.ndarray]          # float32, one per input, in order
    prompt_tokens: int


Event = TextEvent | ChoiceEvent | DoneEvent | ErrorEvent | EmbeddingsEvent

T = TypeVar("T")
RECORDS_KEPT = 10_000     # requests whose figures --report keeps (the latest); a long-running server stays flat


class QueueFull(QnnrtError):
    pass


class ShuttingDown(QnnrtError):
    pass


@dataclass
class Job:
    """One request: prompt ids in, events out through ``emit`` (called on the engine thread). Its
    ``n`` choices run one after another, each with a sampler (and grammar matcher) of its own."""
    request_id: str
    endpoint: str
    prompt: list[int]
    max_tokens: int
    sampling: SamplingOptions
    emit: Callable[[Event], None]
    stops: list[str] = field(default_factory=list)
    top_logprobs: int | None = None    # None: no logprobs; k >= 0: the chosen token's and k best
    n: int = 1
    grammar: Grammar | None = None     # every token masked to it
    adapter: str | None = None         # the LoRA adapter to generate with (None: the base model)
    cancelled: threading.Event = field(default_factory=threading.Event)
    submitted: float = field(default_factory=time.perf_counter)

    def cancel(self) -> None:
        self.cancelled.set()


@dataclass
class EmbedJob:
    """Inputs to embed (tokenized and padded already), one run each, on the engine thread (the
    programs share it)."""
    request_id: str
    inputs: list[EmbedInput]
    emit: Callable[[Event], None]
    cancelled: threading.Event = field(default_factory=threading.Event)
    submitted: float = field(default_factory=time.perf_counter)
    endpoint: str = "embeddings"

    def cancel(self) -> None:
        self.cancelled.set()


class LogprobSampler:
    """Wraps a sampler: remembers the log-probabilities of each row it chose a token from, in
    order, until `of` reads them (a speculative forward chooses several tokens before the first
    is emitted)."""

    def __init__(self, sampler: Callable[[np.ndarray], int], top: int):
        self.sampler, self.top = sampler, top
        self._rows: deque[np.ndarray] = deque()

    def _remember(self, logits: np.ndarray) -> None:
        self._rows.append(log_softmax(np.asarray(logits, dtype=np.float64).reshape(-1)))

    def __call__(self, logits: np.ndarray) -> int:
        self._remember(logits)
        return self.sampler(logits)

    def verify(self, logits: np.ndarray, draft: int) -> int:
        self._remember(logits)
        return verify_token(self.sampler, logits, draft)

    def of(self, token: int) -> TokenLogprob:
        """The log-probabilities of the oldest row not yet read: the one `token` was chosen from."""
        lp = self._rows.popleft()
        best: list[int] = [int(i) for i in np.argsort(-lp, kind="stable")[:self.top]] if self.top else []
        return TokenLogprob(token, float(lp[token]), [(i, float(lp[i])) for i in best])


class Engine:
    """The FIFO (at most ``max_queue`` waiting; more is QueueFull at once), the one thread that runs
    jobs in order, the figures per request and in total."""

    def __init__(self, generator: CachedGenerator, text: TextModel, *, max_queue: int = 16,
                 reuse_kv: bool = True, pd_in_use: Callable[[], int | None] = lambda: None,
                 embedder: EmbeddingModel | None = None, tracer: Tracing | None = None):
        self.generator, self.text, self.max_queue, self.reuse_kv = generator, text, max_queue, reuse_kv
        self.tracer = tracer    # each request a slice of the run's trace (its generation inside)
        self.embedder = embedder
        self._pd_in_use = pd_in_use
        self._waiting: deque[Job | EmbedJob] = deque()
        self._cond = threading.Condition()
        self._running: Job | EmbedJob | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="qnnrt-serve-engine", daemon=True)
        self.records: deque[dict[str, Any]] = deque(maxlen=RECORDS_KEPT)   # the latest requests' figures
        self.totals: dict[str, float] = {"requests": 0, "completed": 0, "cancelled": 0, "failed": 0,
                                         "rejected_queue_full": 0, "rejected_shutting_down": 0, "prompt_tokens": 0,
                                         "cached_tokens": 0,
                                         "completion_tokens": 0, "generated_tokens": 0, "ttft_s_sum": 0.0,
                                         "decode_s_sum": 0.0, "decode_tokens": 0, "decode_forwards": 0,
                                         "draft_verifications": 0, "draft_tokens_accepted": 0,
                                         "embedded_inputs": 0, "records_dropped": 0}
        self.pd_bytes: int | None = None

    # -- the HTTP side ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        self.pd_bytes = self._pd_in_use()

    def submit(self, job: Job | EmbedJob) -> None:
        """Queue ``job``; waiting jobs whose client left are dropped first, so they hold no place."""
        with self._cond:
            if self._stopping:
                raise ShuttingDown("the server is shutting down")
            for gone in [j for j in self._waiting if j.cancelled.is_set()]:
                self._waiting.remove(gone)
                self._skip(gone)
            if len(self._waiting) >= self.max_queue:
                self.totals["rejected_queue_full"] += 1
                raise QueueFull(f"{len(self._waiting)} requests are waiting (--max-queue {self.max_queue}); "
                                f"retry later")
            self.totals["requests"] += 1
            self._waiting.append(job)
            self._cond.notify()

    @property
    def queue_depth(self) -> int:
        """Waiting jobs whose client is still there."""
        return sum(not j.cancelled.is_set() for j in list(self._waiting))

    @property
    def busy(self) -> bool:
        return self._running is not None

    def stop(self, timeout: float | None = None) -> None:
        """``abort``, then wait for the thread."""
        self.abort()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def abort(self) -> None:
        """Refuse new jobs, end the waiting ones (503) and the running one at its next token. Does
        not block (a signal handler calls it)."""
        with self._cond:
            self._stopping = True
            waiting, self._waiting = list(self._waiting), deque()
            if self._running is not None:
                self._running.cancel()
            self._cond.notify_all()
            for job in waiting:           # each in the report: its client is told 503
                self.totals["rejected_shutting_down"] += 1
                self._record(job, "refused: the server is shutting down (it was queued)",
                             {"queue_wait_s": time.perf_counter() - job.submitted})
        for job in waiting:
            job.emit(ErrorEvent(503, "the server is shutting down", "server_shutting_down"))

    # -- the engine thread -----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopping:
                    self._cond.wait()
                if not self._waiting:
                    return
                job = self._running = self._waiting.popleft()
            try:
                if self.tracer is None:
                    self._job(job)
                else:
                    with self.tracer.scope(f"request {job.request_id}", "serve",
                                           {"endpoint": job.endpoint}):
                        self._job(job)
            finally:
                with self._cond:
                    self._running = None

    def _job(self, job: Job | EmbedJob) -> None:
        if job.cancelled.is_set():
            self._skip(job)
        elif isinstance(job, EmbedJob):
            self._embed(job)
        else:
            self._run(job)

    def _skip(self, job: Job | EmbedJob) -> None:
        """A job cancelled before it started (its client left while it waited)."""
        with self._cond:                   # from the engine thread or the HTTP side's submit
            self.totals["cancelled"] += 1
            self._record(job, "cancelled before it started", {})

    def _attempt(self, job: Job | EmbedJob, what: str, work: Callable[[], T]) -> T | None:
        """`work()`, or None once the job failed: a prompt over the context is a 400, a qnnrt error
        a 500 saying what failed, anything else an internal error logged with its traceback."""
        try:
            return work()
        except ContextLengthError as e:
            self._fail(job, 400, str(e), "context_length_exceeded")
        except QnnrtError as e:
            self._fail(job, 500, f"{what} failed: {e}", f"{what}_failed")
        except Exception as e:
            log.exception("request %s failed", job.request_id)
            self._fail(job, 500, f"internal error ({type(e).__name__})", "internal_error")
        finally:
            self.pd_bytes = self._pd_in_use()
        return None

    def _run(self, job: Job) -> None:
        started = time.perf_counter()
        gens: list[TextGeneration] = []

        def choices() -> list[TextGeneration]:
            for index in range(job.n):
                if index == 0:
                    self.generator.use_adapter(job.adapter)     # its own KV cache (llm/session.py)
                gens.append(self._choice(job, index))
                if gens[-1].finish_reason == "cancelled":
                    break
            return gens
        if self._attempt(job, "generation", choices) is None:
            return
        first = gens[0]
        completion = sum(len(g.result.tokens) for g in gens)
        figures = first.result.report() | {"prompt_tokens": len(job.prompt), "cached_tokens": first.reused,
                                           "prefilled_tokens": len(first.result.prompt_tokens),
                                           "queue_wait_s": started - job.submitted, "choices": len(gens),
                                           "completion_tokens": completion, "adapter": job.adapter}
        if gens[-1].finish_reason == "cancelled":
            self.totals["cancelled"] += 1
            self._record(job, "cancelled", figures)
            why = "the server is shutting down" if self._stopping else "the request was cancelled"
            job.emit(ErrorEvent(503, f"generation stopped: {why}", "cancelled"))
            return
        t = self.totals
        t["completed"] += 1
        t["prompt_tokens"] += len(job.prompt)
        t["cached_tokens"] += first.reused
        t["completion_tokens"] += completion
        t["ttft_s_sum"] += first.result.ttft_s
        t["decode_s_sum"] += sum(sum(g.result.decode_s) for g in gens)
        t["decode_tokens"] += sum(len(g.result.decode_s) for g in gens)
        t["decode_forwards"] += sum(g.result.decode_forwards for g in gens)
        spec = [g.result.speculative for g in gens if g.result.speculative is not None]
        t["draft_verifications"] += sum(s["verifications"] for s in spec)
        t["draft_tokens_accepted"] += sum(s["accepted"] for s in spec)
        self._record(job, ",".join(g.finish_reason for g in gens), figures)
        job.emit(DoneEvent(len(job.prompt), completion, first.reused))

    def _choice(self, job: Job, index: int) -> TextGeneration:
        """One choice, its events emitted as it goes; the later ones reuse the prompt's KV entries."""
        constraint: TokenConstraint | None = job.grammar.matcher() if job.grammar is not None else None
        if constraint is not None and self.tracer is not None:
            constraint = TracedConstraint(constraint, self.tracer)
        sampler = Sampler(job.sampling.for_choice(index), constraint, history=job.prompt)
        lp = LogprobSampler(sampler, job.top_logprobs) if job.top_logprobs is not None else None

        def on_text(chunk: str, token: int | None) -> None:
            self.totals["generated_tokens"] += token is not None
            job.emit(TextEvent(chunk, token, lp.of(token) if lp is not None and token is not None else None, index))

        g = generate_text(self.generator, self.text, job.prompt, job.max_tokens, sampler=lp or sampler,
                          stops=job.stops, on_text=on_text, cancelled=job.cancelled.is_set,
                          reuse=self.reuse_kv or index > 0)
        if g.finish_reason != "cancelled":
            job.emit(ChoiceEvent(index, g.finish_reason, len(g.result.tokens)))
        return g

    def _embed(self, job: EmbedJob) -> None:
        assert self.embedder is not None
        started = time.perf_counter()
        embedder = self.embedder
        done = self._attempt(job, "embedding", lambda: [embedder.run(x) for x in job.inputs])
        if done is None:
            return
        tokens = sum(e.tokens for e in done)
        self.totals["completed"] += 1
        self.totals["embedded_inputs"] += len(done)
        self.totals["prompt_tokens"] += tokens
        self._record(job, "stop", {"inputs": len(done), "prompt_tokens": tokens,
                                   "embed_s": time.perf_counter() - started, "queue_wait_s": started - job.submitted})
        job.emit(EmbeddingsEvent([e.vector for e in done], tokens))

    def _fail(self, job: Job | EmbedJob, status: int, message: str, code: str) -> None:
        self.totals["failed"] += 1
        self._record(job, "error", {"error": message})
        job.emit(ErrorEvent(status, message, code))

    def _record(self, job: Job | EmbedJob, finish: str, figures: dict[str, Any]) -> None:
        if len(self.records) == RECORDS_KEPT:
            self.totals["records_dropped"] += 1
        self.records.append({"id": job.request_id, "endpoint": job.endpoint, "finish_reason": finish} | figures)
