"""The HTTP side (Starlette, an ASGI app): OpenAI's /v1/models, /v1/chat/completions and
/v1/completions (plain JSON or server-sent events), /v1/embeddings, /health, /metrics and /openapi.json.
Bodies are decoded into serve/schema.py's types (serve/requests.py); requests become engine jobs;
nothing a request sends reaches the filesystem."""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse as StarletteJSON
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from qnnrt.llm.sampling import SamplingOptions
from qnnrt.llm.embedding import EmbedInput
from qnnrt.llm.errors import ContextLengthError, TokenizerError
from qnnrt.llm.grammar import Grammar, GrammarCompiler
from qnnrt.llm.layout import LlmLayout
from qnnrt.llm.text import TextModel
from qnnrt.serve import openai_api as api
from qnnrt.serve import requests as rq
from qnnrt.serve import responses
from qnnrt.serve import schema as s
from qnnrt.serve import schema_responses as rs
from qnnrt.serve.openapi import openapi_document
from qnnrt.serve.prepare import Preparer, Prompts
from qnnrt.serve.engine import DoneEvent, EmbeddingsEvent, EmbedJob, Engine, ErrorEvent, Event, Job, QueueFull, \
    ShuttingDown
from qnnrt.serve.responses import ResponsesShaper
from qnnrt.serve.shapers import ChatShaper, CompletionShaper, Shaper
from qnnrt.serve.tools import ToolRequest, parse_tools

log = logging.getLogger("qnnrt.serve")
T = TypeVar("T", s.ChatRequest, s.CompletionRequest, s.EmbeddingsRequest, rs.ResponsesRequest)
RETRY_AFTER_S = 1           # a 429's Retry-After: about one short request's time on the model
_JSON_TYPE = re.compile(r"^\s*application/json\s*(;\s*charset\s*=\s*\"?utf-8\"?\s*)?$", re.IGNORECASE)


class JSONResponse(StarletteJSON):
    """JSON with non-ASCII escaped: a request's lone surrogate echoed in an error (say, in a model
    name) is still valid JSON and UTF-8."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


@dataclass(frozen=True)
class ServeSettings:
    model_id: str
    api_key: str | None
    max_body_bytes: int
    embeddings_id: str | None = None
    max_tokens: int | None = None          # the most tokens one choice generates (None: to the context's end)
    sampling: SamplingOptions = rq.OPENAI_SAMPLING   # what a request leaves out (a Genie bundle: its sampler)
    stops: tuple[str, ...] = ()            # stop strings of a request that gives none (a Genie bundle's stop-sequence)
    cors_origins: tuple[str, ...] = ()     # browser origins allowed to call the API (none: CORS off)
    adapters: tuple[str, ...] = ()         # LoRA adapters, each a model id of its own (vLLM's convention)


@dataclass(frozen=True)
class Prepared:
    """A generation request made ready off the event loop: the model it names (the base's id or an
    adapter's), its parameters, prompt ids, grammar and tools."""
    model: str
    params: rq.Params
    ids: list[int]
    grammar: Grammar | None = None
    tools: ToolRequest | None = None


class Service:
    """Requests in, engine jobs out, responses shaped like OpenAI's."""

    def __init__(self, engine: Engine, text: TextModel, layout: LlmLayout, settings: ServeSettings,
                 created: int, grammars: GrammarCompiler | None = None):
        self.engine, self.text, self.layout, self.settings, self.created = engine, text, layout, settings, created
        self.prompts = Prompts(text, layout, grammars)
        self.prep = Preparer(engine.max_queue)
        self.openapi_doc = openapi_document(settings.model_id, layout.vocab_size, settings.embeddings_id,
                                            engine.embedder.layout.dim if engine.embedder is not None else None,
                                            authorized=settings.api_key is not None)

    # -- request plumbing ----------------------------------------------------------------------
    def authorize(self, request: Request) -> None:
        key = self.settings.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise api.ApiError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>' with the "
                                    "key given to qnnrt serve --api-key", code="invalid_api_key")

    async def body(self, request: Request) -> bytes:
        """The body's bytes, within --max-body-bytes (413 past it) and sent as JSON (415 otherwise)."""
        kind = request.headers.get("content-type")
        if kind is not None and not _JSON_TYPE.match(kind):
            raise api.ApiError(415, f"Content-Type {kind[:100]!r}: send the body as JSON with 'Content-Type: "
                                    f"application/json' (charset utf-8, if any)", code="unsupported_media_type")
        limit = self.settings.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            raise api.ApiError(413, f"request body of {length[:30]} bytes exceeds the limit of {limit} bytes "
                                    f"(qnnrt serve --max-body-bytes)", code="request_too_large")
        data = bytearray()
        try:
            async for chunk in request.stream():
                data += chunk
                if len(data) > limit:
                    raise api.ApiError(413, f"request body exceeds the limit of {limit} bytes "
                                            f"(qnnrt serve --max-body-bytes)", code="request_too_large")
        except ClientDisconnect:
            raise api.ApiError(400, "the client left before sending the whole body", code="incomplete_body") from None
        return bytes(data)

    def decode(self, data: bytes, schema: type[T], model_id: str | None = None) -> T:
        """The body as a ``schema`` (serve/requests.py: one bounded parse, a 400 naming the field); its
        model must be ``model_id`` (default: the LLM's, or one of its LoRA adapters). On the preparing
        threads."""
        body = rq.decode(data, schema)
        ids = [model_id] if model_id else [self.settings.model_id, *self.settings.adapters]
        if body.model not in ids:
            served = ", ".join(f"'{i}'" for i in ids)
            raise api.ApiError(404, f"The model '{body.model[:100]}' does not exist here; this endpoint serves "
                                    f"{served}", param="model", code="model_not_found")
        return body

    # -- endpoints -----------------------------------------------------------------------------
    def model_ids(self) -> list[str]:
        return ([self.settings.model_id, *self.settings.adapters] +
                ([self.settings.embeddings_id] if self.settings.embeddings_id else []))

    def card(self, name: str) -> dict[str, Any]:
        """A model's card; an adapter's names its base model as ``parent`` (as vLLM's do)."""
        card = api.model_card(name, self.created)
        return card | {"parent": self.settings.model_id} if name in self.settings.adapters else card

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self.card(m) for m in self.model_ids()]})

    async def model(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self.model_ids():
            raise api.ApiError(404, f"The model '{name[:100]}' does not exist", param="model",
                               code="model_not_found")
        return JSONResponse(self.card(name))

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "queue_depth": self.engine.queue_depth, "busy": self.engine.busy})

    async def metrics(self, request: Request) -> Response:
        t, e = self.engine.totals, self.engine
        lines = [f'qnnrt_requests_total{{status="{k}"}} {int(t[k])}'
                 for k in ("completed", "cancelled", "failed", "rejected_queue_full", "rejected_shutting_down")]
        lines += [f"qnnrt_requests_received_total {int(t['requests'])}",
                  f"qnnrt_queue_depth {e.queue_depth}", f"qnnrt_busy {int(e.busy)}",
                  f"qnnrt_prompt_tokens_total {int(t['prompt_tokens'])}",
                  f"qnnrt_prompt_tokens_cached_total {int(t['cached_tokens'])}",
                  f"qnnrt_completion_tokens_total {int(t['completion_tokens'])}",
                  f"qnnrt_generated_tokens_total {int(t['generated_tokens'])}",
                  f"qnnrt_time_to_first_token_seconds_sum {t['ttft_s_sum']:.6f}",
                  f"qnnrt_time_to_first_token_seconds_count {int(t['completed'])}",
                  f"qnnrt_decode_seconds_sum {t['decode_s_sum']:.6f}",
                  f"qnnrt_decode_tokens_total {int(t['decode_tokens'])}",
                  f"qnnrt_decode_forwards_total {int(t['decode_forwards'])}",
                  f"qnnrt_draft_verifications_total {int(t['draft_verifications'])}",
                  f"qnnrt_draft_tokens_accepted_total {int(t['draft_tokens_accepted'])}",
                  f"qnnrt_decode_tokens_per_second "
                  f"{t['decode_tokens'] / t['decode_s_sum'] if t['decode_s_sum'] else 0:.3f}"]
        if e.pd_bytes is not None:
            lines.append(f"qnnrt_pd_in_use_bytes {e.pd_bytes}")
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self.openapi_doc)

    async def chat(self, request: Request) -> Response:
        data = await self.body(request)
        return await self.generate(request, "chat", await self.prep.run(self.prepare_chat, data, size=len(data)))

    def prepare_chat(self, data: bytes) -> Prepared:
        req = self.decode(data, s.ChatRequest)
        params = rq.params(req, self.layout.vocab_size, self.settings.sampling, self.settings.stops)
        tools = parse_tools(req)
        ids = self.prompts.encode(self.prompts.render(rq.chat_messages(req), tools), "messages")
        return Prepared(req.model, params, ids, self.prompts.grammar(tools, params.response_format), tools)

    async def completions(self, request: Request) -> Response:
        data = await self.body(request)
        return await self.generate(request, "completion",
                                   await self.prep.run(self.prepare_completion, data, size=len(data)))

    def prepare_completion(self, data: bytes) -> Prepared:
        req = self.decode(data, s.CompletionRequest)
        params = rq.params(req, self.layout.vocab_size, self.settings.sampling, self.settings.stops)
        p = rq.completion_prompt(req, self.layout.vocab_size)
        if isinstance(p, list):
            self.prompts.check_fits(p, "prompt")
            ids = p
        else:
            ids = self.prompts.encode(p, "prompt")
        return Prepared(req.model, params, ids, self.prompts.format_grammar(params.response_format))

    async def responses(self, request: Request) -> Response:
        """OpenAI's Responses API on the chat pipeline (serve/responses.py)."""
        data = await self.body(request)
        req, prepared = await self.prep.run(self.prepare_responses, data, size=len(data))
        tok = self.text.tokenizer

        def shaper(job: Job, p: rq.Params, t: ToolRequest | None) -> Shaper:
            return ResponsesShaper(prepared.model, tok, job, p, t, req)
        return await self.generate(request, "responses", prepared, shaper_of=shaper)

    def prepare_responses(self, data: bytes) -> tuple[rs.ResponsesRequest, Prepared]:
        req = self.decode(data, rs.ResponsesRequest)
        params = responses.params(req, self.settings.sampling, self.settings.stops)
        tools = responses.tools(req)
        ids = self.prompts.encode(self.prompts.render(responses.messages(req), tools, "input"), "input")
        return req, Prepared(req.model, params, ids, self.prompts.grammar(tools, params.response_format), tools)

    async def embeddings(self, request: Request) -> Response:
        emb = self.engine.embedder
        if emb is None or self.settings.embeddings_id is None:
            raise api.ApiError(404, "this server has no embedding model: start qnnrt serve with --embeddings MODEL "
                                    "--embeddings-tokenizer DIR", code="not_found")
        data = await self.body(request)
        job, inputs = await self.prep.run(self.prepare_embeddings, data, size=len(data))
        ev = await self.run_job(request, lambda emit: EmbedJob(api.new_id("emb"), inputs, emit))
        if ev is None:
            return Response(status_code=499)   # the client left: nobody reads it
        assert isinstance(ev, EmbeddingsEvent)
        return JSONResponse(api.embeddings_body(self.settings.embeddings_id, ev.vectors, ev.prompt_tokens,
                                                job.base64))

    def prepare_embeddings(self, data: bytes) -> tuple[rq.EmbeddingsJob, list[EmbedInput]]:
        """The inputs tokenized and padded here (not on the engine thread): one longer than the
        model's sequence is a 400 unless the request says truncate."""
        emb = self.engine.embedder
        assert emb is not None
        job = rq.embeddings(self.decode(data, s.EmbeddingsRequest, self.settings.embeddings_id), emb.layout.dim)
        many = len(job.items) > 1
        inputs = []
        for i, item in enumerate(job.items):
            where = f"input[{i}]" if many else "input"
            try:
                inputs.append(emb.prepare(item, job.truncate, where))
            except ContextLengthError as e:
                raise api.ApiError(400, str(e), param=where, code="context_length_exceeded") from None
            except TokenizerError as e:
                raise api.ApiError(400, str(e), param=where, code="invalid_value") from None
        return job, inputs

    async def run_job(self, request: Request, make: Callable[[Callable[[Event], None]], EmbedJob]) -> Event | None:
        """Submit a one-answer job and wait for its answer (an ErrorEvent is raised; None: the client
        left, and the job is cancelled)."""
        events: asyncio.Queue[Event] = asyncio.Queue()
        job = make(_emitter(events))
        self.submit(job)
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            ev = await _next(job, events, gone)
        finally:
            gone.cancel()
            job.cancel()
        if isinstance(ev, ErrorEvent):
            raise api.ApiError(ev.status, ev.message, code=ev.code)
        return ev

    def submit(self, job: Job | EmbedJob) -> None:
        try:
            self.engine.submit(job)
        except QueueFull as e:
            raise api.ApiError(429, f"the server is busy: {e}", code="rate_limit_exceeded",
                               headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        except ShuttingDown as e:
            raise api.ApiError(503, str(e), code="server_shutting_down") from None

    # -- one generation ------------------------------------------------------------------------
    async def generate(self, request: Request, kind: str, prepared: Prepared,
                       shaper_of: ShaperFactory | None = None) -> Response:
        """Queue the job (on the adapter its model names, if one); answer once its first event comes: an
        error then (a queued request at a stop signal: 503) is a plain error response, never a stream's
        first byte."""
        ids, params = prepared.ids, prepared.params
        events: asyncio.Queue[Event] = asyncio.Queue()
        emit = _emitter(events)

        room = min(self.layout.context_len - len(ids), self.settings.max_tokens or self.layout.context_len)
        prefix = {"chat": "chatcmpl", "completion": "cmpl"}.get(kind, "resp")
        adapter = prepared.model if prepared.model in self.settings.adapters else None
        job = Job(api.new_id(prefix), kind, ids, min(params.max_tokens or room, room), params.sampling, emit,
                  params.stops, params.top_logprobs, n=params.n, grammar=prepared.grammar, adapter=adapter)
        self.submit(job)
        shaper = (shaper_of or self.shaper_for(prepared.model))(job, params, prepared.tools)
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            first = await _next(job, events, gone)
            if first is None:
                return Response(status_code=499)   # the client left while it waited: nobody reads it
            if isinstance(first, ErrorEvent):
                raise api.ApiError(first.status, first.message, code=first.code)
            if params.stream:
                gone.cancel()                       # the streaming response watches for the client itself
                return StreamingResponse(self._stream(job, first, events, shaper), media_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
            return await self._collect(job, first, events, shaper, gone)
        except BaseException:
            job.cancel()
            raise
        finally:
            gone.cancel()

    def shaper_for(self, model_id: str) -> ShaperFactory:
        """The chat or completion shaper, answering as `model_id` (the base's, or the adapter asked for)."""
        tok = self.text.tokenizer

        def shaper(job: Job, params: rq.Params, tools: ToolRequest | None) -> Shaper:
            return ChatShaper(model_id, tok, job, params, tools) if job.endpoint == "chat" \
                else CompletionShaper(model_id, tok, job, params)
        return shaper

    async def _stream(self, job: Job, first: Event, events: asyncio.Queue[Event],
                      shaper: Shaper) -> AsyncIterator[str]:
        """Server-sent events; a client that leaves cancels the task (Starlette), and with it the job."""
        try:
            for chunk in shaper.stream_start():
                yield shaper.sse(chunk)
            ev = first
            while True:
                if isinstance(ev, ErrorEvent):
                    for chunk in shaper.stream_error(api.ApiError(ev.status, ev.message, code=ev.code)):
                        yield shaper.sse(chunk)
                    return
                for chunk in shaper.stream_event(ev):
                    yield shaper.sse(chunk)
                if isinstance(ev, DoneEvent):
                    for line in shaper.stream_end():
                        yield line
                    return
                ev = await events.get()
        finally:
            job.cancel()    # no-op when it finished; stops it at the next token when the client left

    async def _collect(self, job: Job, first: Event, events: asyncio.Queue[Event], shaper: Shaper,
                       gone: asyncio.Future[None]) -> Response:
        ev: Event | None = first
        while ev is not None:
            if isinstance(ev, ErrorEvent):
                raise api.ApiError(ev.status, ev.message, code=ev.code)
            shaper.collect(ev)
            if isinstance(ev, DoneEvent):
                return JSONResponse(shaper.body(ev))
            ev = await _next(job, events, gone)
        return Response(status_code=499)   # the client left: nobody reads it


async def _next(job: Job | EmbedJob, events: asyncio.Queue[Event], gone: asyncio.Future[None]) -> Event | None:
    """The job's next event, or None when the client left first (the job is cancelled)."""
    get = asyncio.ensure_future(events.get())
    waiting: set[asyncio.Future[Any]] = {get, gone}
    done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    if get not in done:
        get.cancel()
        job.cancel()
        return None
    return get.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


Handler = Callable[[Request], Awaitable[Response]]
ShaperFactory = Callable[[Job, rq.Params, "ToolRequest | None"], Shaper]


def _guarded(service: Service, handler: Handler, *, public: bool = False) -> Handler:
    """API key, then the handler; an ApiError is its OpenAI-shaped JSON, anything else a 500 that
    names no internals (logged here)."""

    async def run(request: Request) -> Response:
        try:
            if not public:
                service.authorize(request)
            return await handler(request)
        except api.ApiError as e:
            return JSONResponse(e.body(), status_code=e.status, headers=e.headers)
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return JSONResponse(api.ApiError(500, "internal server error", code="internal_error").body(),
                                status_code=500)

    return run


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    msg = f"{request.method} {request.url.path[:200]}: {exc.detail}"
    return JSONResponse(api.ApiError(exc.status_code, msg, code=code).body(), status_code=exc.status_code,
                        headers=exc.headers)


def create_app(service: Service) -> Starlette:
    g = lambda h, **k: _guarded(service, h, **k)
    routes = [Route("/v1/models", g(service.models), methods=["GET"]),
              Route("/v1/models/{name:path}", g(service.model), methods=["GET"]),
              Route("/v1/chat/completions", g(service.chat), methods=["POST"]),
              Route("/v1/completions", g(service.completions), methods=["POST"]),
              Route("/v1/responses", g(service.responses), methods=["POST"]),
              Route("/v1/embeddings", g(service.embeddings), methods=["POST"]),
              Route("/health", g(service.health, public=True), methods=["GET"]),
              Route("/openapi.json", g(service.openapi), methods=["GET"]),
              Route("/metrics", g(service.metrics), methods=["GET"])]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    if service.settings.cors_origins:
        # answers preflight requests (OPTIONS with Origin and Access-Control-Request-Method) itself,
        # before routing and the API key, as browsers send them without credentials
        app.add_middleware(CORSMiddleware, allow_origins=list(service.settings.cors_origins),
                           allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type"],
                           max_age=600)
    return app


def _emitter(events: asyncio.Queue[Event]) -> Callable[[Event], None]:
    """What the engine thread calls with a job's events: they go to `events` on this event loop
    (dropped once the loop is gone: nobody is listening at shutdown)."""
    loop = asyncio.get_running_loop()

    def emit(ev: Event) -> None:
        try:
            loop.call_soon_threadsafe(events.put_nowait, ev)
        except RuntimeError:
            pass
    return emit
