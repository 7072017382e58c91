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
from functools import partial
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse as StarletteJSON
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from qnnrt.llm.chat_template import render_chat
from qnnrt.llm.sampling import SamplingOptions
from qnnrt.llm.errors import ChatTemplateError, GrammarError, TokenizerError
from qnnrt.llm.grammar import Grammar, GrammarCompiler
from qnnrt.llm.layout import LlmLayout
from qnnrt.llm.text import TextModel
from qnnrt.serve import openai_api as api
from qnnrt.serve import requests as rq
from qnnrt.serve import schema as s
from qnnrt.serve.openapi import openapi_document
from qnnrt.serve.engine import DoneEvent, EmbeddingsEvent, EmbedJob, Engine, ErrorEvent, Event, Job, QueueFull, \
    ShuttingDown
from qnnrt.serve.shapers import ChatShaper, CompletionShaper, Shaper
from qnnrt.serve.tools import ToolRequest, forced_call_lark, messages_for_plain_template, parse_tools, \
    template_renders_tools

log = logging.getLogger("qnnrt.serve")
T = TypeVar("T", s.ChatRequest, s.CompletionRequest, s.EmbeddingsRequest)
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
    adapters: tuple[str, ...] = ()         # LoRA adapters, each a model id of its own (vLLM's convention)


class Service:
    """Requests in, engine jobs out, responses shaped like OpenAI's."""

    def __init__(self, engine: Engine, text: TextModel, layout: LlmLayout, settings: ServeSettings,
                 created: int, grammars: GrammarCompiler | None = None):
        self.engine, self.text, self.layout, self.settings, self.created = engine, text, layout, settings, created
        self.grammars = grammars
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

    async def read(self, request: Request, schema: type[T], model_id: str | None = None) -> T:
        """The body as a ``schema`` (serve/requests.py: one bounded parse, a 400 naming the field); its
        model must be ``model_id`` (default: the LLM's)."""
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
        body = rq.decode(bytes(data), schema)
        ids = [model_id] if model_id else [self.settings.model_id, *self.settings.adapters]
        if body.model not in ids:
            served = ", ".join(f"'{i}'" for i in ids)
            raise api.ApiError(404, f"The model '{body.model[:100]}' does not exist here; this endpoint serves "
                                    f"{served}", param="model", code="model_not_found")
        return body

    def encode(self, text: str, param: str) -> list[int]:
        try:
            return self.text.prompt_ids(text)
        except TokenizerError as e:
            raise api.ApiError(400, str(e), param=param, code="invalid_value") from None

    def check_fits(self, ids: list[int]) -> None:
        cap = self.layout.prompt_capacity
        if len(ids) > cap:
            raise api.ApiError(400, f"the prompt has {len(ids)} tokens; at most {cap} fit this model (context "
                                    f"{self.layout.context_len} tokens, prefill window {self.layout.prefill.ar_len})",
                               param="messages", code="context_length_exceeded")

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
                 for k in ("completed", "cancelled", "failed", "rejected_queue_full")]
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
        req = await self.read(request, s.ChatRequest)
        params = rq.params(req, self.layout.vocab_size, self.settings.sampling)
        messages = rq.chat_messages(req)
        tools = parse_tools(req)
        prompt = self.render(messages, tools)
        # compiled off the event loop: the first grammar walks the whole vocabulary
        grammar = await asyncio.to_thread(self.tool_grammar, tools) if tools is not None and tools.constrained \
            else await asyncio.to_thread(self.format_grammar, params.response_format)
        return await self.generate(request, "chat", self.encode(prompt, "messages"), params, grammar, tools,
                                   model=req.model)

    async def completions(self, request: Request) -> Response:
        req = await self.read(request, s.CompletionRequest)
        params = rq.params(req, self.layout.vocab_size, self.settings.sampling)
        p = rq.completion_prompt(req, self.layout.vocab_size)
        ids = p if isinstance(p, list) else self.encode(p, "prompt")
        grammar = await asyncio.to_thread(self.format_grammar, params.response_format)
        return await self.generate(request, "completion", ids, params, grammar, model=req.model)

    async def embeddings(self, request: Request) -> Response:
        emb = self.engine.embedder
        if emb is None or self.settings.embeddings_id is None:
            raise api.ApiError(404, "this server has no embedding model: start qnnrt serve with --embeddings MODEL "
                                    "--embeddings-tokenizer DIR", code="not_found")
        job = rq.embeddings(await self.read(request, s.EmbeddingsRequest, self.settings.embeddings_id),
                            emb.layout.dim)
        ev = await self.run_job(request, lambda emit: EmbedJob(api.new_id("emb"), job.texts, emit))
        if ev is None:
            return Response(status_code=499)   # the client left: nobody reads it
        assert isinstance(ev, EmbeddingsEvent)
        return JSONResponse(api.embeddings_body(self.settings.embeddings_id, ev.vectors, ev.prompt_tokens,
                                                job.base64))

    async def run_job(self, request: Request, make: Callable[[Callable[[Event], None]], EmbedJob]) -> Event | None:
        """Submit a one-answer job and wait for its answer (an ErrorEvent is raised; None: the client
        left, and the job is cancelled)."""
        events: asyncio.Queue[Event] = asyncio.Queue()
        emit = _emitter(events)

        job = make(emit)
        self.submit(job)
        gone = asyncio.ensure_future(_disconnected(request))
        get = asyncio.ensure_future(events.get())
        try:
            done, _ = await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
            if get not in done:
                return None
            ev = get.result()
        finally:
            gone.cancel()
            get.cancel()
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

    def render(self, messages: list[dict[str, Any]], tools: ToolRequest | None) -> str:
        """The prompt: the template renders the offered tools itself when it can, else they go into
        the system message (and earlier calls into the assistant's text)."""
        tok = self.text.tokenizer
        offered = tools.offered if tools is not None else ()
        native = template_renders_tools(tok.chat_template)
        if not native:
            messages = messages_for_plain_template(messages, offered)
        try:
            return render_chat(tok.chat_template, messages, special_tokens=tok.special_tokens,
                               tools=[t.as_template_tool() for t in offered] if native and offered else None)
        except ChatTemplateError as e:
            raise api.ApiError(400, str(e), param="messages", code="chat_template_error") from None

    def compile(self, what: str, make: Callable[[GrammarCompiler], Grammar]) -> Grammar:
        if self.grammars is None:
            raise api.ApiError(400, f"{what}: constrained decoding needs an end-of-sequence id, and this model "
                                    f"and tokenizer have none", param=what, code="unsupported_parameter")
        try:
            return make(self.grammars)
        except GrammarError as e:
            raise api.ApiError(400, f"{what}: the grammar library cannot compile it: {e}", param=what,
                               code="invalid_schema") from None

    def format_grammar(self, rf: s.ResponseFormat | None) -> Grammar | None:
        if isinstance(rf, s.JsonObjectFormat):
            return self.compile("response_format", lambda g: g.json_schema({"type": "object"}))
        if isinstance(rf, s.JsonSchemaFormat):
            schema = rf.json_schema.schema if rf.json_schema.schema is not None else {"type": "object"}
            return self.compile("response_format.json_schema.schema", lambda g: g.json_schema(schema))
        return None

    def tool_grammar(self, tools: ToolRequest) -> Grammar:
        """The grammar of a forced or required call; each tool's parameters are checked on their
        own first, so a bad one is named."""
        for i, t in enumerate(tools.tools):
            if t in tools.offered:
                check = partial(GrammarCompiler.json_schema, schema=t.parameters)
                self.compile(f"tools[{i}].function.parameters", check)
        return self.compile("tools", lambda g: g.lark(forced_call_lark(tools)))

    # -- one generation ------------------------------------------------------------------------
    async def generate(self, request: Request, kind: str, ids: list[int], params: rq.Params,
                       grammar: Grammar | None = None, tools: ToolRequest | None = None,
                       model: str | None = None) -> Response:
        self.check_fits(ids)
        events: asyncio.Queue[Event] = asyncio.Queue()
        emit = _emitter(events)

        room = min(self.layout.context_len - len(ids), self.settings.max_tokens or self.layout.context_len)
        job = Job(api.new_id("chatcmpl" if kind == "chat" else "cmpl"), kind, ids,
                  min(params.max_tokens or room, room), params.sampling, emit, params.stops, params.top_logprobs,
                  n=params.n, grammar=grammar, adapter=model if model in self.settings.adapters else None)
        self.submit(job)
        model_id, tok = model or self.settings.model_id, self.text.tokenizer
        shaper = ChatShaper(model_id, tok, job, params, tools) if kind == "chat" \
            else CompletionShaper(model_id, tok, job, params)
        if params.stream:
            return StreamingResponse(self._stream(job, events, shaper), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await self._collect(request, job, events, shaper)

    async def _stream(self, job: Job, events: asyncio.Queue[Event], shaper: Shaper) -> AsyncIterator[str]:
        """Server-sent events; a client that leaves cancels the task (Starlette), and with it the job."""
        try:
            for chunk in shaper.stream_start():
                yield _sse(chunk)
            while True:
                ev = await events.get()
                if isinstance(ev, ErrorEvent):
                    yield _sse(api.ApiError(ev.status, ev.message, code=ev.code).body())
                    return
                for chunk in shaper.stream_event(ev):
                    yield _sse(chunk)
                if isinstance(ev, DoneEvent):
                    yield "data: [DONE]\n\n"
                    return
        finally:
            job.cancel()    # no-op when it finished; stops it at the next token when the client left

    async def _collect(self, request: Request, job: Job, events: asyncio.Queue[Event], shaper: Shaper) -> Response:
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            while True:
                get = asyncio.ensure_future(events.get())
                done, _ = await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
                if get not in done:
                    get.cancel()
                    job.cancel()
                    return Response(status_code=499)   # nobody reads it
                ev = get.result()
                if isinstance(ev, ErrorEvent):
                    raise api.ApiError(ev.status, ev.message, code=ev.code)
                shaper.collect(ev)
                if isinstance(ev, DoneEvent):
                    return JSONResponse(shaper.body(ev))
        finally:
            gone.cancel()
            job.cancel()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


Handler = Callable[[Request], Awaitable[Response]]


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
              Route("/v1/embeddings", g(service.embeddings), methods=["POST"]),
              Route("/health", g(service.health, public=True), methods=["GET"]),
              Route("/openapi.json", g(service.openapi), methods=["GET"]),
              Route("/metrics", g(service.metrics), methods=["GET"])]
    return Starlette(routes=routes, exception_handlers={HTTPException: _http_error})


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
