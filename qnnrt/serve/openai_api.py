"""The OpenAI API's request fields (checked, one clear 4xx per mistake) and response shapes, as the
official client expects them. Plain data: no HTTP, no model."""
from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class Params:
    """Sampling and output options shared by both endpoints."""
    max_tokens: int | None
    temperature: float
    top_p: float
    seed: int | None
    stops: list[str]
    top_logprobs: int | None       # None: no logprobs
    stream: bool
    include_usage: bool


def parse_params(body: dict, *, chat: bool) -> Params:
    n = _int(body, "n", 1)
    if n is not None and n != 1:
        raise _unsupported("n", f"n={n} (one choice per request)")
    best_of = _int(body, "best_of", 1)
    if best_of is not None and best_of != 1:
        raise _unsupported("best_of", f"best_of={best_of}")
    for name in ("presence_penalty", "frequency_penalty"):
        if _number(body, name, 0.0, -2.0, 2.0) != 0.0:
            raise _unsupported(name, "a non-zero penalty")
    bias = body.get("logit_bias")
    if bias is not None and not isinstance(bias, dict):
        raise _bad("logit_bias", "expected an object", "invalid_type")
    if bias:
        raise _unsupported("logit_bias", "a logit bias")
    if body.get("tools") or body.get("functions"):
        raise _unsupported("tools", "tool calling")
    rf = body.get("response_format")
    if rf is not None and (not isinstance(rf, dict) or rf.get("type") != "text"):
        raise _unsupported("response_format", f"response_format {rf!r} (only type text)")
    max_tokens = _int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1)
    if max_tokens is None and not chat:
        max_tokens = 16                       # the completions API's default
    seed = _int(body, "seed", -(1 << 63), (1 << 63) - 1)
    stream = _bool(body, "stream")
    so = body.get("stream_options")
    if so is not None and (not isinstance(so, dict) or not isinstance(so.get("include_usage", False), bool)):
        raise _bad("stream_options", "expected {\"include_usage\": true|false}", "invalid_type")
    if so is not None and not stream:
        raise _bad("stream_options", "only allowed with stream: true")
    return Params(max_tokens=max_tokens, temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
                  top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
                  seed=None if seed is None else seed % (1 << 64), stops=_stops(body),
                  top_logprobs=_logprobs(body, chat), stream=stream,
                  include_usage=bool(so and so.get("include_usage")))


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


def chat_messages(body: dict) -> list[dict[str, str]]:
    """Messages as the chat template reads them: role and text content ("developer" is "system")."""
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
        if m.get("tool_calls"):
            raise _unsupported(f"{where}.tool_calls", "tool calls")
        out.append({"role": "system" if role == "developer" else role,
                    "content": _content(m.get("content"), f"{where}.content")})
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
