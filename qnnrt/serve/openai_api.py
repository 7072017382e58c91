"""The OpenAI API's request fields (checked, one clear 4xx per mistake) and response shapes, as the
official client expects them. Plain data: no HTTP, no model."""
from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

from qnnrt.llm.sampling import SamplingOptions

MAX_STOPS = 4
MAX_TOP_LOGPROBS = 20          # chat; completions allow 5
ROLES = {"system", "developer", "user", "assistant", "tool"}


class ApiError(Exception):
    """An OpenAI-shaped error: status, message, the parameter at fault, a code."""

    TYPES = {401: "invalid_request_error", 404: "invalid_request_error", 429: "requests",
             500: "server_error", 503: "server_error"}

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


def _bad(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param, code=code)


def _number(body: dict, name: str, default: float, lo: float, hi: float, *, lo_open: bool = False) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _bad(name, f"expected a number, got {v!r}", "invalid_type")
    if v < lo or v > hi or (lo_open and v == lo):
        raise _bad(name, f"{v} is outside {'(' if lo_open else '['}{lo}, {hi}]")
    return float(v)


def _int(body: dict, name: str, lo: int, hi: int | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(name, f"expected an integer, got {v!r}", "invalid_type")
    if v < lo or (hi is not None and v > hi):
        raise _bad(name, f"{v} is outside [{lo}, {hi if hi is not None else 'inf'}]")
    return v


def _bool(body: dict, name: str) -> bool:
    v = body.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise _bad(name, f"expected true or false, got {v!r}", "invalid_type")
    return v


def _text(value: str, where: str) -> str:
    """A string that is valid Unicode (JSON's \\ud800 escapes decode to lone surrogates, which no
    tokenizer takes)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(where, "not valid Unicode (a lone surrogate)", "invalid_value") from None
    return value


def _unsupported(name: str, what: str) -> ApiError:
    return ApiError(400, f"{name}: {what} is not supported by this server", param=name, code="unsupported_parameter")


MAX_CHOICES = 16
MAX_LOGIT_BIAS = 300           # entries, as OpenAI allows


@dataclass(frozen=True)
class ResponseFormat:
    """What the output must be: "text" (free), "json_object" (any JSON object) or "json_schema"."""
    type: str = "text"
    schema: dict[str, Any] | None = None
    name: str | None = None


@dataclass(frozen=True)
class Params:
    """Sampling and output options shared by both endpoints."""
    max_tokens: int | None
    sampling: SamplingOptions
    n: int
    stops: list[str]
    top_logprobs: int | None       # None: no logprobs
    stream: bool
    include_usage: bool
    response_format: ResponseFormat


def parse_params(body: dict, *, chat: bool, vocab_size: int) -> Params:
    n = _int(body, "n", 1, MAX_CHOICES) or 1
    best_of = _int(body, "best_of", 1)
    if best_of is not None and best_of != n:
        raise _unsupported("best_of", f"best_of={best_of} other than n")
    max_tokens = _int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1)
    if max_tokens is None and not chat:
        max_tokens = 16                       # the completions API's default
    stream = _bool(body, "stream")
    so = body.get("stream_options")
    if so is not None and (not isinstance(so, dict) or not isinstance(so.get("include_usage", False), bool)):
        raise _bad("stream_options", "expected {\"include_usage\": true|false}", "invalid_type")
    if so is not None and not stream:
        raise _bad("stream_options", "only allowed with stream: true")
    return Params(max_tokens=max_tokens, sampling=_sampling(body, vocab_size), n=n, stops=_stops(body),
                  top_logprobs=_logprobs(body, chat), stream=stream,
                  include_usage=bool(so and so.get("include_usage")),
                  response_format=_response_format(body))


def _sampling(body: dict, vocab_size: int) -> SamplingOptions:
    """OpenAI's knobs, and llama-server's top_k, min_p and repetition_penalty."""
    seed = _int(body, "seed", -(1 << 63), (1 << 63) - 1)
    return SamplingOptions(
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_k=_int(body, "top_k", 0, vocab_size) or 0,
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        seed=None if seed is None else seed % (1 << 64),
        min_p=_number(body, "min_p", 0.0, 0.0, 1.0),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        repetition_penalty=_number(body, "repetition_penalty", 1.0, 0.0, 10.0, lo_open=True),
        logit_bias=_logit_bias(body, vocab_size))


def _logit_bias(body: dict, vocab_size: int) -> dict[int, float]:
    """{"token id": bias in [-100, 100]}: the id a decimal string, as JSON keys are."""
    bias = body.get("logit_bias")
    if bias is None:
        return {}
    if not isinstance(bias, dict):
        raise _bad("logit_bias", "expected an object of token id -> bias", "invalid_type")
    if len(bias) > MAX_LOGIT_BIAS:
        raise _bad("logit_bias", f"{len(bias)} entries, at most {MAX_LOGIT_BIAS}")
    out: dict[int, float] = {}
    for key, value in bias.items():
        if not (isinstance(key, str) and key.isdigit() and int(key) < vocab_size):
            raise _bad("logit_bias", f"key {key!r} is not a token id of this model (0..{vocab_size - 1})")
        where = f"logit_bias[{key}]"
        out[int(key)] = _number({where: value}, where, 0.0, -100.0, 100.0)
    return out


def _response_format(body: dict) -> ResponseFormat:
    rf = body.get("response_format")
    if rf is None:
        return ResponseFormat()
    if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
        raise _bad("response_format", 'expected {"type": "text" | "json_object" | "json_schema", ...}')
    if rf["type"] != "json_schema":
        return ResponseFormat(rf["type"])
    js = rf.get("json_schema")
    if not isinstance(js, dict) or not isinstance(js.get("name"), str):
        raise _bad("response_format.json_schema", 'expected {"name": ..., "schema": {...}, "strict": true}',
                   "invalid_type")
    schema = js.get("schema", {"type": "object"})
    if not isinstance(schema, dict):
        raise _bad("response_format.json_schema.schema", "expected a JSON schema (an object)", "invalid_type")
    return ResponseFormat("json_schema", schema, js["name"])


def _stops(body: dict) -> list[str]:
    s = body.get("stop")
    if s is None:
        return []
    items = [s] if isinstance(s, str) else s
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise _bad("stop", "expected a string or a list of strings", "invalid_type")
    if len(items) > MAX_STOPS:
        raise _bad("stop", f"{len(items)} stop sequences, at most {MAX_STOPS}")
    return [_text(x, "stop") for x in items if x]


def _logprobs(body: dict, chat: bool) -> int | None:
    if chat:
        on = _bool(body, "logprobs")
        top = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
        if top is not None and not on:
            raise _bad("top_logprobs", "requires logprobs: true")
        return (top or 0) if on else None
    return _int(body, "logprobs", 0, 5)


def chat_messages(body: dict) -> list[dict[str, Any]]:
    """Messages as a chat template reads them (transformers' shape): role and text content
    ("developer" is "system"); an assistant's tool_calls with their arguments parsed; a tool
    message's tool_call_id."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise _bad("messages", "expected a non-empty list of messages", "invalid_type")
    out = []
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad(where, "expected an object with role and content", "invalid_type")
        role = m.get("role")
        if role not in ROLES:
            raise _bad(f"{where}.role", f"{role!r} is not one of {sorted(ROLES)}")
        calls = m.get("tool_calls")
        content = m.get("content")
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role,
                               "content": "" if content is None and (calls or role == "assistant")
                               else _content(content, f"{where}.content")}
        if calls:
            if role != "assistant":
                raise _bad(f"{where}.tool_calls", "only an assistant message has tool calls")
            msg["tool_calls"] = _message_tool_calls(calls, f"{where}.tool_calls")
        if role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str):
                raise _bad(f"{where}.tool_call_id", "a tool message needs the id of the call it answers",
                           "invalid_type")
            msg["tool_call_id"] = call_id
        out.append(msg)
    return out


def _message_tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    """An assistant's calls as transformers passes them to a template: arguments as a dict (the API
    sends a JSON string)."""
    if not isinstance(calls, list):
        raise _bad(where, "expected a list of tool calls", "invalid_type")
    out = []
    for j, c in enumerate(calls):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _bad(f"{where}[{j}]", 'expected {"id": ..., "type": "function", "function": {"name": ..., '
                                        '"arguments": "..."}}', "invalid_type")
        args = fn.get("arguments", "{}")
        try:
            parsed = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            raise _bad(f"{where}[{j}].function.arguments", "not valid JSON") from None
        out.append({"id": c.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": parsed}})
    return out


def _content(c: Any, where: str) -> str:
    if isinstance(c, str):
        return _text(c, where)
    if isinstance(c, list):
        texts = []
        for j, part in enumerate(c):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise _unsupported(f"{where}[{j}]", f"content part {kind!r} (text parts only)")
            texts.append(_text(part["text"], f"{where}[{j}].text"))
        return "".join(texts)
    raise _bad(where, "expected a string or a list of text parts", "invalid_type")


def completion_prompt(body: dict, vocab_size: int) -> str | list[int]:
    """A string, a list of one string, or a list of token ids."""
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]
    if isinstance(p, str):
        return _text(p, "prompt")
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        bad = [t for t in p if not 0 <= t < vocab_size]
        if bad:
            raise _bad("prompt", f"token id(s) {bad[:5]} outside the vocabulary of {vocab_size}")
        return list(p)
    if isinstance(p, list) and len(p) > 1:
        raise _unsupported("prompt", "a batch of prompts")
    raise _bad("prompt", "expected a string, a list of one string, or a list of token ids", "invalid_type")


def check_completion_only(body: dict) -> None:
    for name in ("tools", "tool_choice"):
        if body.get(name) is not None:
            raise _unsupported(name, "tool calling on /v1/completions (use /v1/chat/completions)")
    if _bool(body, "echo"):
        raise _unsupported("echo", "echo")
    if body.get("suffix") is not None:
        raise _unsupported("suffix", "suffix")


# -- responses --------------------------------------------------------------------------------------
def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """OpenAI's usage; the prompt tokens whose KV entries were reused count as cached_tokens."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def model_card(model_id: str, created: int) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "qnnrt"}


def chat_logprob_entry(token_text: str, logprob: float, top: list[tuple[str, float]]) -> dict[str, Any]:
    return {"token": token_text, "logprob": logprob, "bytes": list(token_text.encode("utf-8")),
            "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode("utf-8"))} for t, lp in top]}


# -- embeddings -------------------------------------------------------------------------------------
MAX_EMBEDDING_INPUTS = 2048    # as OpenAI allows


@dataclass(frozen=True)
class EmbeddingsRequest:
    texts: list[str]
    base64: bool


def embeddings_request(body: dict, dim: int) -> EmbeddingsRequest:
    """`input`: a string or a list of strings; `encoding_format`: float or base64; `dimensions`
    only the model's own."""
    inp = body.get("input")
    texts = [inp] if isinstance(inp, str) else inp
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        if isinstance(texts, list) and texts and all(isinstance(t, (int, list)) for t in texts):
            raise _unsupported("input", "token ids (send text)")
        raise _bad("input", "expected a string or a non-empty list of strings", "invalid_type")
    if len(texts) > MAX_EMBEDDING_INPUTS:
        raise _bad("input", f"{len(texts)} inputs, at most {MAX_EMBEDDING_INPUTS}")
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise _bad("encoding_format", f"{fmt!r} is not float or base64")
    dims = _int(body, "dimensions", 1)
    if dims is not None and dims != dim:
        raise _unsupported("dimensions", f"dimensions={dims} (this model gives {dim})")
    return EmbeddingsRequest([_text(t, f"input[{i}]") for i, t in enumerate(texts)], fmt == "base64")


def embeddings_body(model_id: str, vectors: list[Any], prompt_tokens: int, base64: bool) -> dict[str, Any]:
    """float: the float32 values as JSON numbers (exact); base64: their little-endian bytes."""
    import base64 as b64

    import numpy as np
    data = []
    for i, v in enumerate(vectors):
        a = np.asarray(v, dtype="<f4")
        data.append({"object": "embedding", "index": i,
                     "embedding": b64.b64encode(a.tobytes()).decode("ascii") if base64 else a.tolist()})
    return {"object": "list", "data": data, "model": model_id,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}
