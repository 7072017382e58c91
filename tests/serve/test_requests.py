"""The request schema without a server: every body is decoded by one bounded parse into its schema
(qnnrt/serve/schema.py); what it refuses is a 400 naming the field, what OpenAI's API and llama-server
accept is accepted; /openapi.json is valid OpenAPI 3.1, and what it calls valid is what the decoder
accepts (bodies generated from the document by schemathesis, in this process)."""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from qnnrt.serve import requests as rq
from qnnrt.serve import schema as s
from qnnrt.serve.openai_api import ApiError
from qnnrt.serve.openapi import decimal_at_most, openapi_document
from qnnrt.serve.tools import parse_tools

VOCAB = 512
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
DONE = {"model": "m", "prompt": "Once"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def raw(body: dict[str, Any], field: str, text: str) -> bytes:
    """``body`` with ``field`` spelled as raw JSON ``text`` (what json.dumps cannot write)."""
    return (json.dumps(body)[:-1] + f', "{field}": {text}}}').encode()


def refused(data: bytes | str | dict, schema: type = s.ChatRequest) -> ApiError:
    with pytest.raises(ApiError) as e:
        req = rq.decode(json.dumps(data) if isinstance(data, dict) else data, schema)
        if isinstance(req, s.ChatRequest):
            rq.params(req, VOCAB), rq.chat_messages(req), parse_tools(req)
        elif isinstance(req, s.CompletionRequest):
            rq.params(req, VOCAB), rq.completion_prompt(req, VOCAB)
    assert e.value.status == 400 and e.value.message and "Traceback" not in e.value.message
    return e.value


# -- the three 500s of issue 35, and every numeric field -------------------------------------------
NUMERIC = ["temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
           "seed", "n", "max_tokens", "max_completion_tokens", "top_logprobs"]


def test_a_logit_bias_key_of_a_non_ascii_digit_is_a_400_naming_logit_bias():
    e = refused(CHAT | {"logit_bias": {"²": 1}})
    assert e.param == "logit_bias" and "key" in e.message


@pytest.mark.parametrize("field", NUMERIC)
def test_a_400_digit_integer_in_a_numeric_field_is_a_400_naming_it(field):
    assert refused(raw(CHAT | ({"logprobs": True} if field == "top_logprobs" else {}), field, "1" * 400)).param == field
    assert refused(raw(CHAT, field, "1e400")).param == field


def test_a_400_digit_logit_bias_value_is_a_400():
    assert refused(raw(CHAT, "logit_bias", '{"5": ' + "1" * 400 + "}")).param == "logit_bias"


def test_tool_call_arguments_nested_100000_deep_are_a_400_naming_them():
    msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
        CALL | {"function": {"name": "f", "arguments": "[" * 100000}}]}]
    e = refused(CHAT | {"messages": msgs})
    assert e.param == "messages[1].tool_calls[0].function.arguments" and "deeper" in e.message
    e = refused(CHAT | {"messages": [msgs[1] | {"tool_calls": [CALL | {"function": {"name": "f", "arguments": "{"}}]}]})
    assert e.param == "messages[0].tool_calls[0].function.arguments" and "not valid JSON" in e.message


# -- a bounded parse ---------------------------------------------------------------------------------
@pytest.mark.parametrize("data, why", [
    (b"[" * 100000 + b"]" * 100000, "expected `object`"),
    (b'{"model": "m", "messages": ' + b"[" * 100000 + b"]" * 100000 + b"}", ""),
    (raw(CHAT, "zz", "[" * 100000 + "]" * 100000), "zz"),
    (raw(CHAT, "response_format", '{"type": "json_schema", "json_schema": {"name": "x", "schema": {"a": '
         + "[" * 5000 + "]" * 5000 + "}}}"), ""),
    (raw(CHAT, "tools", '[{"type": "function", "function": {"name": "f", "parameters": '
         + '{"a": ' * 65 + "1" + "}" * 65 + "}}]"), "deeper than 64"),
    (b'{"model": "\xff\xfe"}', "UTF-8"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}', "surrogate"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "a\\udfffb"}]}', "surrogate"),
    (raw(CHAT, "temperature", "NaN"), "not valid JSON"),
    (raw(CHAT, "temperature", "Infinity"), "not valid JSON"),
    (raw(CHAT, "user", "1" * 5000), "user"),
    (b"", "not valid JSON"),
    (b"{", "not valid JSON"),
    (json.dumps(CHAT).encode() + b" trailing", "not valid JSON"),
])
def test_hostile_json_is_a_400(data, why):
    assert why.lower() in refused(data).message.lower()


def test_a_deep_but_bounded_schema_is_accepted():
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(s.MAX_JSON_DEPTH - 1):
        deep = {"not": deep}
    req = rq.decode(json.dumps(CHAT | {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": deep}}}), s.ChatRequest)
    assert isinstance(req.response_format, s.JsonSchemaFormat)


# -- every mistake names its field ---------------------------------------------------------------------
USER = [{"role": "user", "content": "x"}]
MISTAKES = [  # (body, schema, the param, the code)
    (CHAT | {"temperature": "hot"}, s.ChatRequest, "temperature", "invalid_type"),
    (CHAT | {"temperature": 2.5}, s.ChatRequest, "temperature", "invalid_value"),
    (CHAT | {"max_tokens": True}, s.ChatRequest, "max_tokens", "invalid_type"),
    (CHAT | {"max_tokens": "10"}, s.ChatRequest, "max_tokens", "invalid_type"),
    (CHAT | {"seed": 1.5}, s.ChatRequest, "seed", "invalid_type"),
    (CHAT | {"seed": 1 << 63}, s.ChatRequest, "seed", "invalid_value"),
    (CHAT | {"n": 17}, s.ChatRequest, "n", "invalid_value"),
    (CHAT | {"top_k": VOCAB + 1}, s.ChatRequest, "top_k", "invalid_value"),
    (CHAT | {"logit_bias": {"512": 1}}, s.ChatRequest, "logit_bias", "invalid_value"),
    (CHAT | {"logit_bias": {"-1": 1}}, s.ChatRequest, "logit_bias", "invalid_value"),
    (CHAT | {"logit_bias": {"5": 101}}, s.ChatRequest, "logit_bias", "invalid_value"),
    (CHAT | {"logit_bias": {str(i): 1 for i in range(301)}}, s.ChatRequest, "logit_bias", "invalid_value"),
    (CHAT | {"stop": ["a"] * 5}, s.ChatRequest, "stop", "invalid_value"),
    (CHAT | {"stop": 7}, s.ChatRequest, "stop", "invalid_type"),
    (CHAT | {"stream_options": {"include_usage": True}}, s.ChatRequest, "stream_options", "invalid_value"),
    (CHAT | {"stream": True, "stream_options": {"include_usage": "yes"}}, s.ChatRequest,
     "stream_options.include_usage", "invalid_type"),
    (CHAT | {"top_logprobs": 2}, s.ChatRequest, "top_logprobs", "invalid_value"),
    (CHAT | {"logprobs": True, "top_logprobs": 21}, s.ChatRequest, "top_logprobs", "invalid_value"),
    (CHAT | {"foo": 1}, s.ChatRequest, "foo", "unknown_parameter"),
    (CHAT | {"functions": []}, s.ChatRequest, "functions", "unsupported_parameter"),
    ({"messages": USER}, s.ChatRequest, "model", "missing_required_parameter"),
    ({"model": "m"}, s.ChatRequest, "messages", "missing_required_parameter"),
    (CHAT | {"messages": []}, s.ChatRequest, "messages", "invalid_value"),
    (CHAT | {"messages": "hi"}, s.ChatRequest, "messages", "invalid_type"),
    (CHAT | {"messages": ["hi"]}, s.ChatRequest, "messages[0]", "invalid_type"),
    (CHAT | {"messages": [{"role": "wizard", "content": "x"}]}, s.ChatRequest, "messages[0].role", "invalid_value"),
    (CHAT | {"messages": [{"content": "x"}]}, s.ChatRequest, "messages[0].role", "missing_required_parameter"),
    (CHAT | {"messages": [{"role": "user"}]}, s.ChatRequest, "messages[0].content", "missing_required_parameter"),
    (CHAT | {"messages": [{"role": "user", "content": 5}]}, s.ChatRequest, "messages[0].content", "invalid_type"),
    (CHAT | {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     s.ChatRequest, "messages[0].content[0].type", "invalid_value"),
    (CHAT | {"messages": [{"role": "user", "content": "x", "extra": 1}]}, s.ChatRequest, "messages[0].extra",
     "unknown_parameter"),
    (CHAT | {"messages": [{"role": "tool", "content": "x"}]}, s.ChatRequest, "messages[0].tool_call_id",
     "missing_required_parameter"),
    (CHAT | {"messages": [{"role": "user", "content": "x", "tool_calls": [CALL]}]}, s.ChatRequest,
     "messages[0].tool_calls", "unknown_parameter"),
    (CHAT | {"tool_choice": "required"}, s.ChatRequest, "tool_choice", "invalid_value"),
    (CHAT | {"tools": [TOOL], "tool_choice": "sometimes"}, s.ChatRequest, "tool_choice", "invalid_value"),
    (CHAT | {"response_format": {"type": "yaml"}}, s.ChatRequest, "response_format.type", "invalid_value"),
    (CHAT | {"response_format": {"type": "json_schema"}}, s.ChatRequest, "response_format.json_schema",
     "missing_required_parameter"),
    (CHAT | {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": []}}}, s.ChatRequest,
     "response_format.json_schema.schema", "invalid_type"),
    (CHAT | {"metadata": {"k": 1}}, s.ChatRequest, "metadata", "invalid_type"),
    (CHAT | {"metadata": {"k" * 65: "v"}}, s.ChatRequest, "metadata", "invalid_value"),
    (DONE | {"prompt": ["a", "b"]}, s.CompletionRequest, "prompt", "unsupported_parameter"),
    (DONE | {"prompt": ["a", 1]}, s.CompletionRequest, "prompt", "invalid_value"),
    (DONE | {"prompt": [[1, 2]]}, s.CompletionRequest, "prompt[0]", "invalid_type"),
    (DONE | {"prompt": []}, s.CompletionRequest, "prompt", "invalid_value"),
    (DONE | {"prompt": [1, VOCAB]}, s.CompletionRequest, "prompt", "invalid_value"),
    ({"model": "m"}, s.CompletionRequest, "prompt", "missing_required_parameter"),
    (DONE | {"echo": True}, s.CompletionRequest, "echo", "invalid_value"),
    (DONE | {"suffix": "x"}, s.CompletionRequest, "suffix", "unsupported_parameter"),
    (DONE | {"best_of": 2}, s.CompletionRequest, "best_of", "invalid_value"),
    (DONE | {"logprobs": 6}, s.CompletionRequest, "logprobs", "invalid_value"),
    (DONE | {"logprobs": True}, s.CompletionRequest, "logprobs", "invalid_type"),
    (DONE | {"tools": [TOOL]}, s.CompletionRequest, "tools", "unknown_parameter"),
    ({"model": "e", "input": []}, s.EmbeddingsRequest, "input", "invalid_value"),
    ({"model": "e", "input": [[1, 2], "x"]}, s.EmbeddingsRequest, "input", "invalid_value"),
    ({"model": "e", "input": [[]]}, s.EmbeddingsRequest, "input[0]", "invalid_value"),
    ({"model": "e", "input": [-1]}, s.EmbeddingsRequest, "input[0]", "invalid_value"),
    ({"model": "e", "input": "x", "encoding_format": "hex"}, s.EmbeddingsRequest, "encoding_format",
     "invalid_value"),
    ({"model": "e", "input": ["x"] * 2049}, s.EmbeddingsRequest, "input", "invalid_value"),
]

# what no JSON schema states (the published document cannot say it): checked after decoding
UNSTATED = [
    (CHAT | {"tools": [TOOL, TOOL]}, s.ChatRequest, "tools", "invalid_value"),
    (CHAT | {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}}, s.ChatRequest,
     "tool_choice", "invalid_value"),
]


@pytest.mark.parametrize("body, schema, param, code", MISTAKES + UNSTATED)
def test_each_mistake_is_a_400_naming_its_field(body, schema, param, code):
    e = refused(body, schema)
    assert (e.param, e.code) == (param, code), e.message
    assert e.message.startswith(f"{param}: ")
    assert e.body()["error"] == {"message": e.message, "type": "invalid_request_error", "param": param, "code": code}


def test_a_dimensions_other_than_the_models_is_refused_and_its_own_is_served():
    assert rq.embeddings(rq.decode(b'{"model": "e", "input": "x", "dimensions": 8}', s.EmbeddingsRequest), 8).items \
        == ["x"]
    for given, items in (([5, 6], [[5, 6]]), ([[5], [6, 7]], [[5], [6, 7]]), (["a", "b"], ["a", "b"])):
        job = rq.embeddings(rq.decode(json.dumps({"model": "e", "input": given}), s.EmbeddingsRequest), 8)
        assert job.items == items and not job.truncate
    with pytest.raises(ApiError) as e:
        rq.embeddings(rq.decode(b'{"model": "e", "input": "x", "dimensions": 3}', s.EmbeddingsRequest), 8)
    assert e.value.param == "dimensions" and e.value.code == "unsupported_parameter"


# -- what OpenAI's API and llama-server accept, accepted -------------------------------------------------
TEXT_PARTS = [{"type": "text", "text": "Once "}, {"type": "text", "text": "upon"}]
ROLES = {"messages": [{"role": "system", "content": TEXT_PARTS}, {"role": "developer", "content": "be brief"},
                      {"role": "user", "content": TEXT_PARTS, "name": "ann"}]}
CALLED = {"messages": [{"role": "user", "content": "w?"},
                       {"role": "assistant", "content": None, "tool_calls": [CALL], "refusal": None},
                       {"role": "tool", "tool_call_id": "call_1", "content": TEXT_PARTS},
                       {"role": "assistant", "content": TEXT_PARTS}]}
VALID_CHATS = [
    {"stop": "\n"}, {"stop": ["a", "b", "c", "d"]}, {"stop": None}, {"stop": ""}, {"stop": []},
    {"max_completion_tokens": 5}, {"max_tokens": 5, "max_completion_tokens": 3}, {"max_tokens": (1 << 63) - 1},
    {"stream": True, "stream_options": {"include_usage": True}}, {"stream": False, "stream_options": None},
    {"seed": -1}, {"seed": (1 << 63) - 1}, {"user": "u-42"}, {"metadata": {"team": "a", "run": "7"}},
    {"safety_identifier": "h-1"},
    ROLES, CALLED,
    {"tools": [TOOL], "tool_choice": "auto", "parallel_tool_calls": False},
    {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "f"}}},
    {"tools": [TOOL | {"function": {"name": "f", "description": "d", "strict": True}}], "tool_choice": "required"},
    {"tools": [], "tool_choice": "none"},
    {"response_format": {"type": "text"}}, {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "description": "d",
                                                                "schema": {"type": "object"}}}},
    {"logprobs": True, "top_logprobs": 20}, {"logprobs": False},
    {"n": 16, "temperature": 0, "top_p": 1, "top_k": VOCAB, "min_p": 0.05, "presence_penalty": -2,
     "frequency_penalty": 2, "repetition_penalty": 1.1, "logit_bias": {"0": -100, "511": 100}},
    {k: None for k in ("max_tokens", "n", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
                       "frequency_penalty", "repetition_penalty", "seed", "logit_bias", "stop", "stream",
                       "stream_options", "response_format", "user", "max_completion_tokens", "logprobs",
                       "top_logprobs", "tools", "tool_choice", "parallel_tool_calls", "metadata")},
]
VALID_COMPLETIONS = [{"prompt": ["Once"]}, {"prompt": [1, 5, 511]}, {"best_of": 1, "echo": False, "logprobs": 5},
                     {"stop": "x", "stream": True, "stream_options": {"include_usage": False}, "seed": 3, "user": "u"},
                     {"response_format": {"type": "json_object"}, "max_tokens": 1}]


@pytest.mark.parametrize("extra", VALID_CHATS, ids=range(len(VALID_CHATS)))
def test_request_shapes_openai_allows_are_accepted(extra):
    req = rq.decode(json.dumps(CHAT | extra), s.ChatRequest)
    p = rq.params(req, VOCAB)
    msgs = rq.chat_messages(req)
    parse_tools(req)
    assert p.n >= 1 and msgs and all(isinstance(m["content"], str) for m in msgs)


@pytest.mark.parametrize("extra", VALID_COMPLETIONS, ids=range(len(VALID_COMPLETIONS)))
def test_completion_shapes_are_accepted(extra):
    req = rq.decode(json.dumps(DONE | extra), s.CompletionRequest)
    assert rq.params(req, VOCAB).max_tokens and rq.completion_prompt(req, VOCAB)


def test_what_a_request_becomes():
    req = rq.decode(json.dumps(CHAT | ROLES | {"stop": "\n", "max_completion_tokens": 3, "seed": -1}),
                    s.ChatRequest)
    p = rq.params(req, VOCAB)
    assert p.stops == ["\n"] and p.max_tokens == 3 and p.sampling.seed == (1 << 64) - 1 and p.top_logprobs is None
    msgs = rq.chat_messages(req)
    assert msgs[0] == {"role": "system", "content": "Once upon"}
    assert msgs[1] == {"role": "system", "content": "be brief"}
    assert msgs[2] == {"role": "user", "content": "Once upon", "name": "ann"}
    req = rq.decode(json.dumps(CHAT | CALLED), s.ChatRequest)
    msgs = rq.chat_messages(req)
    assert msgs[1]["tool_calls"] == [{"id": "call_1", "type": "function", "function": {"name": "f",
                                                                                       "arguments": {"a": 1}}}]
    assert msgs[2] == {"role": "tool", "content": "Once upon", "tool_call_id": "call_1"}
    p = rq.params(rq.decode(json.dumps(DONE), s.CompletionRequest), VOCAB)
    assert p.max_tokens == 16 and p.n == 1 and p.sampling.temperature == 1.0


# -- the published document ---------------------------------------------------------------------------
def _document(**kw) -> dict[str, Any]:
    return openapi_document("stories", VOCAB, "emb", 8, authorized=True, **kw)


def test_openapi_document_is_valid_openapi_3_1():
    validator = pytest.importorskip("openapi_spec_validator", reason="pip install -e '.[test]'")
    for doc in (_document(), openapi_document("stories", VOCAB)):
        assert doc["openapi"].startswith("3.1")
        validator.validate(doc)
    assert set(_document()["paths"]) == {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models",
                                         "/v1/models/{name}", "/health", "/metrics", "/openapi.json",
                                         "/v1/responses"}
    assert "/v1/embeddings" not in openapi_document("stories", VOCAB)["paths"]


@pytest.mark.parametrize("m", [0, 7, 9, 10, 99, 100, 511, 1000, 49151])
def test_token_id_keys_pattern_is_0_to_m_without_leading_zeros(m):
    import re
    r = re.compile(decimal_at_most(m))
    assert [i for i in range(3 * m + 30) if r.match(str(i))] == list(range(m + 1))
    assert not any(r.match(x) for x in ("01", "-1", "", "1.0", " 1"))


def _validator(name: str):
    jsonschema = pytest.importorskip("jsonschema")
    doc = _document()
    return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": doc["components"]})


def _accepted(data: bytes, schema: type) -> bool:
    """What the server would serve (the model: the app's 404)."""
    try:
        req = rq.decode(data, schema)
        if req.model != ("emb" if schema is s.EmbeddingsRequest else "stories"):
            return False
        if isinstance(req, s.ChatRequest):
            rq.params(req, VOCAB), rq.chat_messages(req), parse_tools(req)
        elif isinstance(req, s.CompletionRequest):
            rq.params(req, VOCAB), rq.completion_prompt(req, VOCAB)
        else:
            rq.embeddings(req, 8)
    except ApiError:
        return False
    return True


@pytest.mark.parametrize("schema", [s.ChatRequest, s.CompletionRequest, s.EmbeddingsRequest])
def test_the_hand_cases_agree_with_the_published_schema(schema):
    v = _validator(schema.__name__)
    model = "emb" if schema is s.EmbeddingsRequest else "stories"
    bodies = [b for b, sch, _, _ in MISTAKES if sch is schema]
    bodies += [CHAT | x for x in VALID_CHATS] if schema is s.ChatRequest else []
    bodies += [DONE | x for x in VALID_COMPLETIONS] if schema is s.CompletionRequest else []
    for body in bodies:
        body = body | {"model": model} if "model" in body else body
        assert v.is_valid(body) == _accepted(json.dumps(body).encode(), schema), body


@pytest.mark.slow
@pytest.mark.parametrize("path, schema", [("/v1/chat/completions", s.ChatRequest),
                                          ("/v1/completions", s.CompletionRequest),
                                          ("/v1/embeddings", s.EmbeddingsRequest)])
def test_bodies_generated_from_the_document_are_decoded_as_it_says(path, schema):
    """schemathesis generates valid and invalid bodies from /openapi.json; the decoder (and the model
    checks) must accept exactly the ones the document's schema calls valid."""
    check_generated_bodies(path, schema.__name__, _unstated, lambda raw: _accepted(raw, schema))


def check_generated_bodies(path: str, schema_name: str, unstated: Callable[[dict], bool],
                           accepted: Callable[[bytes], bool]) -> None:
    """120 bodies schemathesis generates for ``path`` from the published document (valid and invalid):
    ``accepted`` (the decoder and its checks) must say what the document's ``schema_name`` says, for
    every body but those ``unstated`` names (rules the document cannot state)."""
    schemathesis = pytest.importorskip("schemathesis", reason="pip install -e '.[test]'")
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    v = _validator(schema_name)
    op = schemathesis.openapi.from_dict(_document())[path]["POST"]
    modes = st.sampled_from([schemathesis.GenerationMode.POSITIVE] + [schemathesis.GenerationMode.NEGATIVE] * 2)
    seen = {True: 0, False: 0}

    @settings(max_examples=120, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data(), mode=modes)
    def check(data, mode):
        case = data.draw(op.as_strategy(generation_mode=mode))
        if not isinstance(case.body, dict) or unstated(case.body):
            return
        valid = v.is_valid(case.body)
        seen[valid] += 1
        assert accepted(json.dumps(_integers(case.body)).encode()) == valid, (mode, case.body)

    check()
    assert seen[True] >= 10 and seen[False] >= 3, seen


def _integers(value: Any) -> Any:
    """JSON Schema counts 1.0 as an integer; the decoder takes integers written as integers (1):
    the body with integral floats written so."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integers(v) for k, v in value.items()}
    return [_integers(v) for v in value] if isinstance(value, list) else value


def _tool_names(body: dict) -> list[str]:
    tools = body.get("tools")
    functions = [t.get("function") for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
    return [f["name"] for f in functions if isinstance(f, dict) and isinstance(f.get("name"), str)]


def _has_surrogate(value: Any) -> bool:
    """A lone surrogate in any key or string (a character outside the BMP is one code point here)."""
    if isinstance(value, str):
        return any(0xD800 <= ord(ch) <= 0xDFFF for ch in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    return isinstance(value, list) and any(_has_surrogate(v) for v in value)


def _has_tool_calls(body: dict) -> bool:
    messages = body.get("messages")
    return isinstance(messages, list) and any(
        isinstance(m, dict) and isinstance(m.get("tool_calls"), list) and m["tool_calls"] for m in messages)


def _names_a_missing_tool(body: dict) -> bool:
    choice, tools = body.get("tool_choice"), body.get("tools")
    if not (isinstance(choice, dict) and isinstance(tools, list) and tools):
        return False  # no tools: the choice is not read (parse_tools)
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return isinstance(name, str) and name not in _tool_names(body)


# The API's rules the document cannot state as JSON schema, each as the server enforces it (requests.py,
# tools.py); a generated body breaking one is left out, since the schema calls it valid.
UNSTATED_RULES: dict[str, Any] = {
    "strings are text (no lone surrogates)": lambda b: _has_surrogate(b),
    "a call's arguments are JSON text within the depth bound": _has_tool_calls,
    "tool names are distinct": lambda b: len(set(_tool_names(b))) != len(_tool_names(b)),
    "a named tool_choice names one of the tools": _names_a_missing_tool,
}


def _unstated(body: dict) -> bool:
    """Whether the body breaks a rule of UNSTATED_RULES."""
    return any(rule(body) for rule in UNSTATED_RULES.values())


_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
_BREAKING = {  # one body per rule: valid by the document, refused by the server
    "strings are text (no lone surrogates)": {"messages": [{"role": "user", "content": "\ud800"}]},
    "a call's arguments are JSON text within the depth bound": {"messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]},
    "tool names are distinct": {"messages": [{"role": "user", "content": "x"}], "tools": [_TOOL, _TOOL]},
    "a named tool_choice names one of the tools": {"messages": [{"role": "user", "content": "x"}], "tools": [_TOOL],
                                                   "tool_choice": {"type": "function", "function": {"name": "g"}}},
}


@pytest.mark.parametrize("rule", list(UNSTATED_RULES))
def test_each_unstated_rule_is_one_the_server_enforces(rule):
    """The generated-body test leaves out exactly the bodies these rules catch: each rule must be a real
    refusal of the server's on a body the document calls valid (else the filter would hide a bug)."""
    body = {"model": "stories"} | _BREAKING[rule]
    assert _validator("ChatRequest").is_valid(body)
    assert UNSTATED_RULES[rule](body)
    assert not _accepted(json.dumps(body).encode(), s.ChatRequest)
