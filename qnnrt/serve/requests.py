"""Request bodies in, what the engine and the shapers take out. A body is decoded into its schema
(serve/schema.py) by one bounded JSON parse (UTF-8 checked, numbers within float64 and 4300 digits,
nesting within the interpreter's recursion limit, free-form JSON within MAX_JSON_DEPTH): whatever the
schema refuses is a 400 naming the field. Then the checks that need the served model (its vocabulary,
its embedding width), and the conversion into the engine's terms. No HTTP."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence, TypeVar

import msgspec

from qnnrt.llm.sampling import SamplingOptions
from qnnrt.serve import schema as s
from qnnrt.serve.openai_api import ApiError

T = TypeVar("T")

# fields OpenAI's API has that this server does not serve: the 400 says so, and what to use instead
UNSERVED = {
    "functions": "deprecated by OpenAI: use tools and tool_choice",
    "function_call": "deprecated by OpenAI: use tools and tool_choice",
    "suffix": "insertion (suffix) is not supported by this server",
    "modalities": "this server answers text only",
    "audio": "this server answers text only",
    "store": "this server stores no completions",
    "previous_response_id": "this server stores no responses: send the whole conversation in input",
}

_TOO_DEEP = object()
_DECODERS: dict[type, msgspec.json.Decoder] = {}
_AT = re.compile(r"^(?P<text>.*?)(?: - at (?P<key>`key` in )?`(?P<path>[^`]*)`)?$", re.DOTALL)
_LONE_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<![0-9a-fA-F]{4})\\u[dD][c-fC-F]")
_FIELD = re.compile(r"^Object (?:contains unknown|missing required) field `(?P<name>[^`]*)`$")


def bad(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param, code=code)


def decode(data: bytes | str, schema: type[T]) -> T:
    """``data`` as a ``schema``; a 400 naming the field otherwise."""
    dec = _DECODERS.get(schema)
    if dec is None:
        dec = _DECODERS[schema] = msgspec.json.Decoder(schema)
    try:
        return dec.decode(data)
    except msgspec.ValidationError as e:
        raise field_error(str(e)) from None
    except msgspec.DecodeError as e:
        raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
        why = "a string escapes half of a UTF-16 surrogate pair (\\ud800-\\udfff alone is not text)" \
            if _LONE_SURROGATE.search(raw) else str(e)
        raise ApiError(400, f"the body is not valid JSON: {why}", code="invalid_json") from None
    except RecursionError:
        raise ApiError(400, "the body nests too deep to be a request", code="invalid_json") from None


def field_error(message: str) -> ApiError:
    """msgspec's "<what> - at `$.a.b[0]`" as OpenAI's error: the field as `param`."""
    m = _AT.match(message)
    assert m is not None
    text = f"a key: {m['text']}" if m["key"] else m["text"]
    where = (m["path"] or "$").removeprefix("$").removeprefix(".").replace("[...]", "")
    code = "invalid_type" if text.startswith("Expected `") and ", got `" in text else "invalid_value"
    named = _FIELD.match(text) or re.match(r"^(?P<name>[a-z_]+): ", text)
    if named is not None:
        where = f"{where}.{named['name']}" if where else named["name"]
        text = text.removeprefix(f"{named['name']}: ")
        if text.startswith("Object missing"):
            code = "missing_required_parameter"
        elif text.startswith("Object contains unknown"):
            hint = UNSERVED.get(named["name"]) if "." not in where and "[" not in where else None
            text = hint or "not a field of this request"
            code = "unsupported_parameter" if hint else "unknown_parameter"
    if s.UNSUPPORTED in text:
        code = "unsupported_parameter"
    return ApiError(400, f"{where or 'the body'}: {text}", param=where or None, code=code)


def json_value(text: str, where: str) -> Any:
    """JSON text inside a request (a call's arguments), parsed with the same bounds as a body."""
    try:
        value = msgspec.json.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise bad(where, f"not valid JSON ({e})") from None
    except RecursionError:
        value = _TOO_DEEP
    if value is _TOO_DEEP or not s.json_depth_ok(value):
        raise bad(where, f"nests deeper than {s.MAX_JSON_DEPTH} levels")
    return value


# -- generation --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Params:
    """Sampling and output options shared by both endpoints."""
    max_tokens: int | None         # None: up to the context
    sampling: SamplingOptions
    n: int
    stops: list[str]
    top_logprobs: int | None       # None: no logprobs
    stream: bool
    include_usage: bool
    response_format: s.ResponseFormat | None


OPENAI_SAMPLING = SamplingOptions(temperature=1.0)   # what a request leaves out, as OpenAI's API has it


def params(req: s.ChatRequest | s.CompletionRequest, vocab_size: int,
           defaults: SamplingOptions = OPENAI_SAMPLING, default_stops: Sequence[str] = ()) -> Params:
    """`defaults`: temperature, top_k, top_p, seed and the penalties where the request gives none
    (a Genie bundle's sampler; else OpenAI's); `default_stops`: the stop strings of a request
    without ``stop`` (a Genie bundle's stop-sequence)."""
    if isinstance(req, s.ChatRequest):
        max_tokens = req.max_completion_tokens or req.max_tokens
        top = (req.top_logprobs or 0) if req.logprobs else None
    else:
        max_tokens = req.max_tokens or 16         # the completions API's default
        top = req.logprobs
    stops = list(default_stops) if req.stop is None else [req.stop] if isinstance(req.stop, str) else list(req.stop)
    return Params(max_tokens=max_tokens, sampling=_sampling(req, vocab_size, defaults), n=req.n or 1,
                  stops=[x for x in stops if x], top_logprobs=top, stream=bool(req.stream),
                  include_usage=bool(req.stream_options and req.stream_options.include_usage),
                  response_format=req.response_format)


def _sampling(req: s.GenerationRequest, vocab_size: int, d: SamplingOptions) -> SamplingOptions:
    if req.top_k is not None and req.top_k > vocab_size:
        raise bad("top_k", f"{req.top_k} is more than the vocabulary of {vocab_size}")
    bias = req.logit_bias or {}
    outside = [t for t in bias if t >= vocab_size]
    if outside:
        raise bad("logit_bias", f"key {outside[0]} is not a token id of this model (0..{vocab_size - 1})")
    return SamplingOptions(
        temperature=d.temperature if req.temperature is None else req.temperature,
        top_k=d.top_k if req.top_k is None else req.top_k,
        top_p=d.top_p if req.top_p is None else req.top_p,
        seed=d.seed if req.seed is None else req.seed % (1 << 64),
        min_p=req.min_p or 0.0,
        presence_penalty=d.presence_penalty if req.presence_penalty is None else req.presence_penalty,
        frequency_penalty=d.frequency_penalty if req.frequency_penalty is None else req.frequency_penalty,
        repetition_penalty=d.repetition_penalty if req.repetition_penalty is None else req.repetition_penalty,
        penalty_last_n=d.penalty_last_n, logit_bias={int(k): float(v) for k, v in bias.items()})


def _text(content: s.Content | None) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else "".join(p.text for p in content)


def chat_messages(req: s.ChatRequest) -> list[dict[str, Any]]:
    """Messages as a chat template reads them (transformers' shape): role and text content
    ("developer" is "system"), a name if given; an assistant's tool_calls with their arguments
    parsed; a tool message's tool_call_id."""
    out = []
    for i, m in enumerate(req.messages):
        role = "system" if isinstance(m, s.DeveloperMessage) else type(m).__struct_config__.tag
        msg: dict[str, Any] = {"role": role, "content": _text(m.content)}
        if getattr(m, "name", None) is not None:
            msg["name"] = m.name  # type: ignore[union-attr]
        if isinstance(m, s.AssistantMessage) and m.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": json_value(
                    c.function.arguments, f"messages[{i}].tool_calls[{j}].function.arguments")}}
                for j, c in enumerate(m.tool_calls)]
        if isinstance(m, s.ToolMessage):
            msg["tool_call_id"] = m.tool_call_id
        out.append(msg)
    return out


def completion_prompt(req: s.CompletionRequest, vocab_size: int) -> str | list[int]:
    """The prompt's text, or its token ids (each of the vocabulary)."""
    p = req.prompt
    if isinstance(p, str):
        return p
    if isinstance(p[0], str):
        return p[0]
    ids = [int(t) for t in p]
    outside = [t for t in ids if t >= vocab_size]
    if outside:
        raise bad("prompt", f"token id(s) {outside[:5]} outside the vocabulary of {vocab_size}")
    return ids


# -- embeddings --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EmbeddingsJob:
    items: list[str | list[int]]       # texts, or token ids (without special tokens)
    base64: bool
    truncate: bool


def embeddings(req: s.EmbeddingsRequest, dim: int) -> EmbeddingsJob:
    if req.dimensions is not None and req.dimensions != dim:
        raise bad("dimensions", f"dimensions={req.dimensions} {s.UNSUPPORTED} (this model gives {dim})",
                  "unsupported_parameter")
    inp = req.input
    items: list[str | list[int]]
    if isinstance(inp, str):
        items = [inp]
    elif all(isinstance(x, int) for x in inp):
        items = [[int(x) for x in inp]]          # type: ignore[arg-type]  # one input of token ids
    else:
        items = [x if isinstance(x, str) else list(x) for x in inp]  # type: ignore[arg-type]
    return EmbeddingsJob(items, req.encoding_format == "base64", bool(req.truncate))
