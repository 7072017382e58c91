"""What validating one `qnnrt serve` request body costs (run by hand; numbers go to bench/RESULTS.md).

The chat request's schema written twice, as msgspec Structs and as pydantic models (strict: no
"10" for 10), the same fields and bounds; each decodes and validates the same JSON bytes of four
request shapes (a one-line chat, an 8-turn chat with sampling knobs, a chat with tools and an
earlier call, a completion with logit_bias). Then the path this checkout of qnnrt takes for the
same bytes, from bytes to what the engine gets (`qnnrt.serve.requests` when it exists, else the
hand-written field checks of openai_api), so a run on an older checkout gives the "before".

    nice -n 10 python bench/bench_serve_validation.py [--repeat 2000] [--checkout DIR]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

import msgspec
import pydantic
from msgspec import Meta, Struct
from pydantic import BaseModel, ConfigDict, Field

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 512


# -- msgspec ------------------------------------------------------------------------------------------
class MText(Struct, tag_field="type", tag="text", forbid_unknown_fields=True):
    text: str


class MFunction(Struct, forbid_unknown_fields=True):
    name: str
    arguments: str


class MCall(Struct, forbid_unknown_fields=True):
    id: str
    function: MFunction
    type: Literal["function"] = "function"


class MMessage(Struct, forbid_unknown_fields=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[MText] | None = None
    name: str | None = None
    tool_calls: list[MCall] | None = None
    tool_call_id: str | None = None


class MFunctionDef(Struct, forbid_unknown_fields=True):
    name: Annotated[str, Meta(min_length=1)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class MTool(Struct, forbid_unknown_fields=True):
    function: MFunctionDef
    type: Literal["function"] = "function"


class MStreamOptions(Struct, forbid_unknown_fields=True):
    include_usage: bool | None = None


class MRequest(Struct, forbid_unknown_fields=True):
    model: str
    messages: Annotated[list[MMessage], Meta(min_length=1)] | None = None
    prompt: str | list[int] | None = None
    max_tokens: Annotated[int, Meta(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Meta(ge=1)] | None = None
    n: Annotated[int, Meta(ge=1, le=16)] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    min_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    presence_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    seed: Annotated[int, Meta(ge=-(1 << 63), le=(1 << 63) - 1)] | None = None
    logit_bias: Annotated[dict[Annotated[int, Meta(ge=0)], Annotated[float, Meta(ge=-100, le=100)]],
                          Meta(max_length=300)] | None = None
    stop: str | Annotated[list[str], Meta(max_length=4)] | None = None
    stream: bool | None = None
    stream_options: MStreamOptions | None = None
    logprobs: bool | int | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    tools: list[MTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    user: str | None = None


# -- pydantic ------------------------------------------------------------------------------------------
class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class PText(Strict):
    type: Literal["text"]
    text: str


class PFunction(Strict):
    name: str
    arguments: str


class PCall(Strict):
    id: str
    function: PFunction
    type: Literal["function"] = "function"


class PMessage(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[PText] | None = None
    name: str | None = None
    tool_calls: list[PCall] | None = None
    tool_call_id: str | None = None


class PFunctionDef(Strict):
    name: Annotated[str, Field(min_length=1)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class PTool(Strict):
    function: PFunctionDef
    type: Literal["function"] = "function"


class PStreamOptions(Strict):
    include_usage: bool | None = None


class PRequest(Strict):
    model: str
    messages: Annotated[list[PMessage], Field(min_length=1)] | None = None
    prompt: str | list[int] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    n: Annotated[int, Field(ge=1, le=16)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    min_p: Annotated[float, Field(ge=0, le=1)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    seed: Annotated[int, Field(ge=-(1 << 63), le=(1 << 63) - 1)] | None = None
    logit_bias: Annotated[dict[Annotated[int, Field(ge=0)], Annotated[float, Field(ge=-100, le=100)]],
                          Field(max_length=300)] | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    stream: bool | None = None
    stream_options: PStreamOptions | None = None
    logprobs: bool | int | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    tools: list[PTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    user: str | None = None


# -- the requests --------------------------------------------------------------------------------------
TURN = "Once upon a time there was a little cat who liked to play in the garden with a red ball. " * 2
WEATHER = {"type": "function", "function": {"name": "weather", "description": "the forecast", "parameters": {
    "type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"], "additionalProperties": False}}}


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": dict(WEATHER["function"], name=name)}


REQUESTS: dict[str, dict[str, Any]] = {
    "chat, one line": {"model": "stories", "messages": [{"role": "user", "content": "Tell me a story"}],
                       "max_tokens": 64, "stream": True},
    "chat, 8 turns + knobs": {
        "model": "stories", "temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 7, "max_completion_tokens": 64,
        "stop": ["\n\n", "The end"], "stream": True, "stream_options": {"include_usage": True}, "logprobs": True,
        "top_logprobs": 2, "user": "u-1",
        "messages": [{"role": "system", "content": "You tell short stories."}]
        + [{"role": r, "content": TURN} for _ in range(4) for r in ("user", "assistant")][:-1]
        + [{"role": "user", "content": [{"type": "text", "text": "And then?"}]}]},
    "chat, tools + a call": {
        "model": "stories", "tools": [_tool("weather"), _tool("forecast"), _tool("clock")], "tool_choice": "auto",
        "messages": [{"role": "user", "content": "Weather in Paris?"},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"id": "call_1", "type": "function",
                          "function": {"name": "weather", "arguments": '{"city": "Paris", "days": 2}'}}]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]},
    "completion, logit_bias": {"model": "stories", "prompt": "Once upon a time", "max_tokens": 16,
                               "temperature": 0.8, "logit_bias": {str(i): -1.5 for i in range(3, 23)}},
}


def qnnrt_path() -> Callable[[str, bytes], Any]:
    """bytes -> what the engine gets, as this checkout does it."""
    try:
        from qnnrt.serve import requests as rq
        from qnnrt.serve import schema as s
        from qnnrt.serve.tools import parse_tools as typed_tools
    except ImportError:
        from qnnrt.serve import openai_api as api
        from qnnrt.serve.tools import parse_tools

        def old(name: str, data: bytes) -> Any:
            body = json.loads(data)
            chat = "messages" in body
            params = api.parse_params(body, chat=chat, vocab_size=VOCAB)
            if chat:
                return params, api.chat_messages(body), parse_tools(body)
            api.check_completion_only(body)
            return params, api.completion_prompt(body, VOCAB)
        return old

    def new(name: str, data: bytes) -> Any:
        if b'"messages"' in data:
            req = rq.decode(data, s.ChatRequest)
            return rq.params(req, VOCAB), rq.chat_messages(req), typed_tools(req)
        done = rq.decode(data, s.CompletionRequest)
        return rq.params(done, VOCAB), rq.completion_prompt(done, VOCAB)
    return new


def per_call_us(fn: Callable[[], Any], repeat: int) -> float:
    """The median of 7 rounds of `repeat` calls, in microseconds per call."""
    rounds = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        rounds.append((time.perf_counter() - t0) / repeat * 1e6)
    return statistics.median(rounds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--checkout", type=Path, default=ROOT, help="the qnnrt tree whose path is measured")
    args = ap.parse_args()
    sys.path.insert(0, str(args.checkout))
    m_dec = msgspec.json.Decoder(MRequest)
    p_adapter = PRequest.model_validate_json
    path = qnnrt_path()
    print(f"msgspec {msgspec.__version__}, pydantic {pydantic.VERSION}, python {sys.version.split()[0]}; "
          f"median of 7 x {args.repeat} calls, microseconds per request")
    print(f"| request | bytes | json.loads alone | msgspec | pydantic | qnnrt ({path.__name__} path) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, body in REQUESTS.items():
        data = json.dumps(body).encode()
        assert m_dec.decode(data) is not None and p_adapter(data) is not None
        path(name, data)
        ways: list[Callable[[bytes], Any]] = [json.loads, m_dec.decode, p_adapter, partial(path, name)]
        cols = [per_call_us(partial(way, data), args.repeat) for way in ways]
        print(f"| {name} | {len(data)} | " + " | ".join(f"{c:.1f}" for c in cols) + " |")


if __name__ == "__main__":
    main()
