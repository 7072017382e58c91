"""Tool calls without a model: the request's tools and tool_choice, the prompt of a template that
cannot render tools, the grammar of a forced call (random logits under it always give a call of an
offered tool whose arguments validate), and the parser that streams calls out of the text."""
from __future__ import annotations

import json

import numpy as np
import pytest

from qnnrt.serve import schema
from qnnrt.serve.openai_api import ApiError
from qnnrt.serve.requests import chat_messages, decode
from qnnrt.serve.tools import (TOOL_CLOSE, TOOL_OPEN, CallDelta, ContentDelta, ToolCallParser, ToolRequest,
                               forced_call_lark, messages_for_plain_template)
from qnnrt.serve.tools import parse_tools as parse_typed
from tests.helpers.llm_text import text_folder  # noqa: F401

WEATHER = {"type": "function", "function": {"name": "weather", "description": "the forecast", "parameters": {
    "type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer", "minimum": 1,
                                                                                   "maximum": 7}},
    "required": ["city", "days"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {"name": "clock", "parameters": {
    "type": "object", "properties": {"tz": {"enum": ["utc", "cet"]}}, "required": ["tz"],
    "additionalProperties": False}}}
HI = [{"role": "user", "content": "hi"}]


def chat(body: dict) -> schema.ChatRequest:
    return decode(json.dumps({"model": "m", "messages": HI} | body), schema.ChatRequest)


def parse_tools(body: dict) -> ToolRequest | None:
    """A chat body's tools, decoded as the server decodes them."""
    return parse_typed(chat(body))


def test_tool_choice_forms():
    assert parse_tools({}) is None
    r = parse_tools({"tools": [WEATHER, CLOCK]})
    assert r is not None and r.choice == "auto" and not r.constrained and r.names() == {"weather", "clock"}
    r = parse_tools({"tools": [WEATHER, CLOCK], "tool_choice": "none"})
    assert r is not None and r.offered == () and not r.constrained
    r = parse_tools({"tools": [WEATHER, CLOCK], "tool_choice": {"type": "function", "function": {"name": "clock"}},
                     "parallel_tool_calls": False})
    assert r is not None and r.constrained and r.names() == {"clock"} and not r.parallel


@pytest.mark.parametrize("body, param", [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function.name"),
    ({"tools": [{"function": {"name": "f"}}]}, "tools[0].type"),
    ({"tools": [WEATHER, WEATHER]}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
])
def test_bad_tools_are_a_400_naming_the_parameter(body, param):
    with pytest.raises(ApiError) as e:
        parse_tools(body)
    assert e.value.status == 400 and e.value.param == param


def test_a_plain_template_gets_the_tools_and_earlier_calls_as_text():
    msgs = chat_messages(chat({"messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]}))
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Rome"}     # a dict, as transformers
    r = parse_tools({"tools": [WEATHER]})
    assert r is not None
    out = messages_for_plain_template(msgs, r.offered)
    assert out[0]["role"] == "system" and '"name": "weather"' in out[0]["content"]
    assert out[2] == {"role": "assistant",
                      "content": f'{TOOL_OPEN}\n{{"name": "weather", "arguments": {{"city": "Rome"}}}}\n{TOOL_CLOSE}'}
    assert out[3] == {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}


def test_the_parser_streams_content_then_whole_calls_whatever_the_chunking():
    text = (f'Sure.{TOOL_OPEN}\n{{"name": "weather", "arguments": {{"city": "Rome", "days": 2}}}}\n{TOOL_CLOSE}\n'
            f'{TOOL_OPEN}\n{{"name": "clock", "arguments": {{"tz": "utc"}}}}\n{TOOL_CLOSE}\n')
    for step in (1, 2, 5, len(text)):
        p = ToolCallParser({"weather", "clock"})
        deltas = [d for i in range(0, len(text), step) for d in p.feed(text[i:i + step])] + p.flush()
        assert "".join(d.text for d in deltas if isinstance(d, ContentDelta)) == "Sure."
        calls = [d for d in deltas if isinstance(d, CallDelta)]
        assert [(c.index, c.call.name, json.loads(c.call.arguments)) for c in calls] == [
            (0, "weather", {"city": "Rome", "days": 2}), (1, "clock", {"tz": "utc"})]
        assert len({c.call.id for c in calls}) == 2 and all(c.call.id.startswith("call_") for c in calls)


def test_a_block_that_is_not_a_call_of_an_offered_tool_stays_content():
    p = ToolCallParser({"weather"})
    deltas = p.feed(f'a {TOOL_OPEN}{{"name": "other"}}{TOOL_CLOSE} b <tool') + p.flush()
    assert "".join(d.text for d in deltas if isinstance(d, ContentDelta)) == \
        f'a {TOOL_OPEN}{{"name": "other"}}{TOOL_CLOSE} b <tool'
    assert p.calls == []


@pytest.mark.parametrize("parallel", [False, True])
def test_random_logits_under_the_forced_call_grammar_give_valid_calls(text_folder, parallel):  # noqa: F811
    pytest.importorskip("llguidance", reason="tool calls need llguidance (pip install -e '.[serve]')")
    jsonschema = pytest.importorskip("jsonschema")
    from qnnrt.llm.grammar import GrammarCompiler
    from qnnrt.llm.sampling import Sampler, SamplingOptions
    from qnnrt.llm.text import TextTokenizer
    tok = TextTokenizer.from_path(text_folder)
    req = parse_tools({"tools": [WEATHER, CLOCK], "tool_choice": "required", "parallel_tool_calls": parallel})
    assert req is not None
    grammar = GrammarCompiler(tok, 512, [2]).lark(forced_call_lark(req))
    params = {t.name: t.parameters for t in req.tools}
    rng = np.random.default_rng(1)
    for seed in range(3):
        s = Sampler(SamplingOptions(temperature=1.0, seed=seed), grammar.matcher())
        out: list[int] = []
        while len(out) < 600 and (t := s(rng.normal(size=512) * 3)) != 2:
            out.append(t)
        p = ToolCallParser(req.names())
        deltas = p.feed(tok.decode(out)) + p.flush()
        assert p.calls and not [d for d in deltas if isinstance(d, ContentDelta)]
        assert parallel or len(p.calls) == 1
        for call in p.calls:
            jsonschema.validate(json.loads(call.arguments), params[call.name])
