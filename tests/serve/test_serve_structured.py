"""Structured output, tool calls and the sampling knobs through a live `qnnrt serve` (the LLM
fixture, a tokenizer whose chat template renders tools), driven by the official `openai` client.
The fixture's weights are random: what it says is noise, but under a grammar the noise always
parses and validates."""
from __future__ import annotations

import json

import pytest

from qnnrt.llm.chat_template import render_chat
from qnnrt.llm.text import TextTokenizer
from tests.helpers.llm_text import tools_text_folder  # noqa: F401
from tests.serve.conftest import API_KEY, MODEL_ID, start_server
from tests.serve.test_serve import assert_openai_error, client, post

openai = pytest.importorskip("openai", reason="needs the openai client (pip install -e '.[test]')")
jsonschema = pytest.importorskip("jsonschema", reason="needs jsonschema (pip install -e '.[test]')")
pytest.importorskip("llguidance", reason="structured output needs llguidance (pip install -e '.[serve]')")

pytestmark = pytest.mark.slow
HI = [{"role": "user", "content": "Hi"}]
BUDGET = 90             # max_tokens: what the fixture's 128 positions leave after a short prompt

SCHEMAS = {
    "flat-required": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
                                                       "age": {"type": "integer", "minimum": 0, "maximum": 99}},
                      "required": ["name", "age"], "additionalProperties": False},
    "enum-array": {"type": "object", "properties": {"color": {"enum": ["red", "green"]},
                                                    "flags": {"type": "array", "items": {"type": "boolean"},
                                                              "minItems": 1, "maxItems": 3}},
                   "required": ["color", "flags"], "additionalProperties": False},
    "nested": {"type": "object", "properties": {"p": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": -9, "maximum": 9}, "ok": {"type": "boolean"}},
        "required": ["x", "ok"], "additionalProperties": False}}, "required": ["p"], "additionalProperties": False},
}
WEATHER = {"type": "function", "function": {"name": "weather", "description": "the forecast", "parameters": {
    "type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {"name": "clock", "parameters": {
    "type": "object", "properties": {"tz": {"enum": ["utc", "cet"]}}, "required": ["tz"],
    "additionalProperties": False}}}
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, CLOCK)}


@pytest.fixture(scope="module")
def server(tools_text_folder, tmp_path_factory):  # noqa: F811
    s = start_server(tools_text_folder, tmp_path_factory.mktemp("serve") / "report.json", "--api-key", API_KEY)
    yield s
    if s.proc.poll() is None:
        s.stop()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_output_validates(server, name):
    schema = SCHEMAS[name]
    r = client(server).chat.completions.create(
        model=MODEL_ID, messages=HI, max_tokens=BUDGET, temperature=1.0, seed=11,
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}})
    c = r.choices[0]
    assert c.finish_reason == "stop", c.message.content
    jsonschema.validate(json.loads(c.message.content), schema)


def test_json_object_output_is_an_object(server):
    r = client(server).chat.completions.create(model=MODEL_ID, messages=HI, max_tokens=BUDGET, temperature=0,
                                               response_format={"type": "json_object"})
    c = r.choices[0]
    assert c.finish_reason == "stop", c.message.content
    assert isinstance(json.loads(c.message.content), dict)


def test_a_schema_the_library_cannot_compile_is_a_400_naming_the_part(server):
    bad = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)"}}}
    r = post(server, "/v1/chat/completions", {"model": MODEL_ID, "messages": HI, "response_format": {
        "type": "json_schema", "json_schema": {"name": "bad", "schema": bad}}})
    e = assert_openai_error(r, 400)
    assert e["param"] == "response_format.json_schema.schema" and "at /properties/a:" in e["message"]
    r = post(server, "/v1/chat/completions", {"model": MODEL_ID, "messages": HI, "tool_choice": "required",
                                              "tools": [CLOCK, {"type": "function", "function": {
                                                  "name": "f", "parameters": bad}}]})
    assert assert_openai_error(r, 400)["param"] == "tools[1].function.parameters"


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "weather"}}],
                         ids=["required", "named"])
def test_a_forced_tool_call_has_valid_arguments(server, choice):
    r = client(server).chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Rome?"}],
                                               max_tokens=BUDGET, temperature=1.0, seed=5, tools=[WEATHER, CLOCK],
                                               tool_choice=choice, parallel_tool_calls=False)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    assert len(c.message.tool_calls) == 1
    call = c.message.tool_calls[0]
    assert call.id.startswith("call_") and call.type == "function"
    if isinstance(choice, dict):
        assert call.function.name == "weather"
    jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name])


def test_tool_call_answers_validate_against_the_published_document(server):
    import httpx

    from tests.serve.test_serve import AUTH
    from tests.serve.test_serve_fuzz import conforms, sse
    doc = httpx.get(server.base + "/openapi.json", headers=AUTH, timeout=30).json()
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Time?"}], "max_tokens": BUDGET,
            "temperature": 0, "tools": [WEATHER, CLOCK], "tool_choice": "required"}
    whole = post(server, "/v1/chat/completions", body).json()
    assert whole["choices"][0]["message"]["tool_calls"]
    conforms(doc, "ChatCompletion", whole)
    chunks = sse(post(server, "/v1/chat/completions", body | {"stream": True}))
    assert any(c["choices"] and c["choices"][0]["delta"].get("tool_calls") for c in chunks)
    for chunk in chunks:
        conforms(doc, "ChatCompletionChunk", chunk)


def test_tool_choice_none_returns_text(server):
    r = client(server).chat.completions.create(model=MODEL_ID, messages=HI, max_tokens=6, temperature=0,
                                               tools=[WEATHER], tool_choice="none")
    c = r.choices[0]
    assert c.message.tool_calls is None and isinstance(c.message.content, str) and c.finish_reason != "tool_calls"


def test_streamed_tool_calls_reassemble_to_the_same_call(server):
    kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "Time?"}], max_tokens=BUDGET, temperature=0,
              tools=[WEATHER, CLOCK], tool_choice="required")
    whole = client(server).chat.completions.create(**kw).choices[0]
    calls: dict[int, dict] = {}
    finish = None
    for chunk in client(server).chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            finish = ch.finish_reason or finish
            for d in ch.delta.tool_calls or []:
                slot = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = d.id or slot["id"]
                slot["name"] += d.function.name or "" if d.function else ""
                slot["arguments"] += d.function.arguments or "" if d.function else ""
    assert finish == "tool_calls" == whole.finish_reason
    assert [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())] == \
        [(t.function.name, json.loads(t.function.arguments)) for t in whole.message.tool_calls]
    assert all(c["id"].startswith("call_") for c in calls.values())


def test_a_tool_message_is_rendered_back(server, tools_text_folder):  # noqa: F811
    call = {"id": "call_1", "type": "function", "function": {"name": "clock", "arguments": '{"tz": "utc"}'}}
    messages = [{"role": "user", "content": "T"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "9"}]
    r = client(server).chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=2, temperature=0,
                                               tools=[CLOCK])
    tok = TextTokenizer.from_path(tools_text_folder)
    as_transformers = [messages[0], {"role": "assistant", "content": "", "tool_calls": [
        call | {"function": {"name": "clock", "arguments": {"tz": "utc"}}}]}, messages[2]]
    expected = render_chat(tok.chat_template, as_transformers, special_tokens=tok.special_tokens, tools=[CLOCK])
    assert '<tool_call>{"name": "clock", "arguments": {"tz": "utc"}}</tool_call>' in expected
    assert "tool: 9" in expected and expected.startswith("<s>tools: clock")
    assert r.usage.prompt_tokens == len(tok.encode(expected))


def test_n_choices_with_a_seed_are_reproducible(server):
    kw = dict(model=MODEL_ID, messages=HI, max_tokens=6, temperature=1.0, seed=42, n=2)
    a = client(server).chat.completions.create(**kw)
    b = client(server).chat.completions.create(**kw)
    texts = [c.message.content for c in a.choices]
    assert [c.index for c in a.choices] == [0, 1]
    assert texts == [c.message.content for c in b.choices]
    assert texts[0] != texts[1]
    one = client(server).chat.completions.create(**(kw | {"n": 1}))
    assert one.choices[0].message.content == texts[0]           # choice 0 keeps the request's seed
    assert a.usage.prompt_tokens == one.usage.prompt_tokens       # the prompt counted once
    if all(c.finish_reason == "length" for c in a.choices):
        assert a.usage.completion_tokens == 12
    streamed: dict[int, str] = {0: "", 1: ""}
    for chunk in client(server).chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            streamed[ch.index] += ch.delta.content or ""
    assert [streamed[0], streamed[1]] == texts


def test_logit_bias_steers_greedy_decoding(server, tools_text_folder):  # noqa: F811
    base = dict(model=MODEL_ID, prompt="Once", max_tokens=4, temperature=0)
    biased = client(server).completions.create(logit_bias={"65": 100}, **base).choices[0].text
    assert biased == TextTokenizer.from_path(tools_text_folder).decode([65] * 4)
    banned = client(server).completions.create(logit_bias={"65": -100}, **base).choices[0].text
    assert "" != banned != biased
