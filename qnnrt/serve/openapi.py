"""GET /openapi.json: the OpenAPI 3.1 document of this server, generated from the schema types the
requests are decoded into (serve/schema.py), with what this server adds to them: the model ids it
serves, its vocabulary's token ids, its embedding width. Plain data."""
from __future__ import annotations

from typing import Any

import msgspec

from qnnrt.serve import schema as s
from qnnrt.serve import schema_responses as rs

ERRORS = {400: "invalid request: `error.param` names the field", 401: "missing or wrong API key",
          404: "no such model or path", 413: "body over --max-body-bytes", 415: "body not sent as application/json",
          429: "the queue is full (--max-queue): retry after Retry-After seconds",
          500: "the model failed (a bug, or a QNN error)", 503: "the server is shutting down"}
COMPONENTS = [s.ChatRequest, s.CompletionRequest, s.EmbeddingsRequest, s.ChatCompletion, s.ChatCompletionChunk,
              s.Completion, s.EmbeddingsList, s.ModelList, s.Model, s.Health, s.ErrorBody, rs.ResponsesRequest,
              rs.Response, rs.ResponseEvent]


def decimal_at_most(m: int) -> str:
    """A regex of the decimal numbers 0..m as JSON object keys spell them (no leading zeros)."""
    d = str(m)
    alts = [f"[0-{d}]" if len(d) == 1 else "[0-9]"]
    alts += [f"[1-9][0-9]{{{n - 1}}}" for n in range(2, len(d))]
    if len(d) > 1:
        for i, c in enumerate(d):
            lo = 1 if i == 0 else 0
            if int(c) > lo:
                rest = len(d) - i - 1
                alts.append(d[:i] + f"[{lo}-{int(c) - 1}]" + (f"[0-9]{{{rest}}}" if rest else ""))
        alts.append(d)
    return "^(?:" + "|".join(alts) + ")$"


def _branch(prop: dict[str, Any], json_type: str) -> dict[str, Any]:
    """The part of an optional field's schema (anyOf [..., null]) of this JSON type."""
    for b in prop.get("anyOf", [prop]):
        if b.get("type") == json_type:
            return b
    raise KeyError(json_type)


def _with_server_facts(c: dict[str, Any], model_id: str, vocab_size: int, embeddings_id: str | None,
                       embeddings_dim: int | None) -> None:
    """What serve/requests.py checks against the served model, said in the schema; and the rules
    between fields the decoder checks."""
    for cls in (s.ChatRequest, s.CompletionRequest):
        c[cls.__name__]["allOf"] = [r.json_schema() for r in cls.rules]
    last = vocab_size - 1
    c["ResponsesRequest"]["properties"]["model"] = {"type": "string", "enum": [model_id]}
    for name in ("ChatRequest", "CompletionRequest"):
        props = c[name]["properties"]
        props["model"] = {"type": "string", "enum": [model_id]}
        _branch(props["top_k"], "integer")["maximum"] = vocab_size
        _branch(props["logit_bias"], "object")["propertyNames"] = {"pattern": decimal_at_most(last)}
    c["CompletionRequest"]["properties"]["prompt"]["oneOf"][2]["items"]["maximum"] = last
    if embeddings_id is not None and embeddings_dim is not None:
        props = c["EmbeddingsRequest"]["properties"]
        props["model"] = {"type": "string", "enum": [embeddings_id]}
        _branch(props["dimensions"], "integer").update(minimum=embeddings_dim, maximum=embeddings_dim)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(name: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(name)}}}


def _operation(summary: str, ok: dict[str, Any], errors: list[int], *, body: str | None = None,
               public: bool = False) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {"200": ok}}
    for code in errors:
        r = _json("ErrorBody", ERRORS[code])
        if code == 429:
            r["headers"] = {"Retry-After": {"description": "seconds", "schema": {"type": "integer", "minimum": 1}}}
        op["responses"][str(code)] = r
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    if public:
        op["security"] = []
    return op


def _generation(summary: str, request: str, whole: str, chunk: str, auth: list[int]) -> dict[str, Any]:
    last = "the last one `data: [DONE]`" if chunk != "ResponseEvent" else \
        "`event:` its type, the last one response.completed or response.incomplete"
    event = {"type": "object", "description": f"one server-sent event: `data: <a {chunk}>` (or an ErrorBody), {last}",
             "properties": {"event": {"type": "string"}, "id": {"type": "string"}, "retry": {"type": "integer"},
                            "data": {"anyOf": [{"const": "[DONE]"},
                                               {"type": "string", "contentMediaType": "application/json",
                                                "contentSchema": {"anyOf": [_ref(chunk), _ref("ErrorBody")]}}]}},
             "required": ["data"]}
    ok = {"description": "the reply; with stream: true, server-sent events of chunks, then `data: [DONE]`",
          "content": {"application/json": {"schema": _ref(whole)}, "text/event-stream": {"schema": event}}}
    return {"post": _operation(summary, ok, [400, *auth, 404, 413, 415, 429, 500, 503], body=request)}


def openapi_document(model_id: str, vocab_size: int, embeddings_id: str | None = None,
                     embeddings_dim: int | None = None, *, authorized: bool = False) -> dict[str, Any]:
    """The document for a server of this model (and embedding model), with or without an API key."""
    _, components = msgspec.json.schema_components(COMPONENTS, ref_template="#/components/schemas/{name}")
    _with_server_facts(components, model_id, vocab_size, embeddings_id, embeddings_dim)
    auth = [401] if authorized else []
    paths: dict[str, Any] = {
        "/v1/chat/completions": _generation("a chat reply", "ChatRequest", "ChatCompletion", "ChatCompletionChunk",
                                            auth),
        "/v1/completions": _generation("a text completion", "CompletionRequest", "Completion", "Completion", auth),
        "/v1/responses": _generation("a response (OpenAI's Responses API; nothing is stored)", "ResponsesRequest",
                                     "Response", "ResponseEvent", auth),
        "/v1/models": {"get": _operation("the models served", _json("ModelList", "the models"), auth)},
        "/v1/models/{name}": {"get": _operation("one model", _json("Model", "the model"), [*auth, 404]) | {
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]}},
        "/health": {"get": _operation("liveness and queue", _json("Health", "the server answers"), [], public=True)},
        "/metrics": {"get": _operation("Prometheus metrics", {"description": "text exposition format", "content": {
            "text/plain": {"schema": {"type": "string"}}}}, auth)},
        "/openapi.json": {"get": _operation("this document", {"description": "OpenAPI 3.1", "content": {
            "application/json": {"schema": {"type": "object"}}}}, auth)},
    }
    if embeddings_id is not None:
        paths["/v1/embeddings"] = {"post": _operation(
            "sentence embeddings", _json("EmbeddingsList", "one vector per input"),
            [400, *auth, 404, 413, 415, 429, 500, 503], body="EmbeddingsRequest")}
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "qnnrt serve", "version": _version(),
                 "description": "OpenAI-compatible API of one LLM (and embedding model) on a Qualcomm HTP"},
        "paths": paths, "components": {"schemas": components}}
    if authorized:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("qnnrt")
    except PackageNotFoundError:
        return "0"
