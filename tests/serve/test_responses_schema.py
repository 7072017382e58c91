"""The Responses API's requests (no server): the shapes OpenAI's client sends decoded into the chat
pipeline's terms, mistakes a 400 naming the field, and the decoder to the published document
(schemathesis, as tests/serve/test_requests.py does for the other endpoints)."""
from __future__ import annotations

import json
from typing import Any

import pytest

from qnnrt.serve import requests as rq
from qnnrt.serve import responses
from qnnrt.serve import schema as s
from qnnrt.serve import schema_responses as r
from qnnrt.serve.openai_api import ApiError
from tests.serve.test_requests import check_generated_bodies

BASE: dict[str, Any] = {"model": "stories", "input": "Once"}
SCHEMA = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}


def _decode(body: dict[str, Any]) -> r.ResponsesRequest:
    return rq.decode(json.dumps(body), r.ResponsesRequest)


def test_a_conversation_of_items_becomes_chat_messages():
    req = _decode(BASE | {"instructions": "Be brief", "input": [
        {"role": "user", "content": "What is the weather?"},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny.",
                                                               "annotations": []}]},
        {"role": "developer", "content": [{"type": "input_text", "text": "Thanks"}]}]})
    assert responses.messages(req) == [
        {"role": "system", "content": "Be brief"},
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
        {"role": "system", "content": "Thanks"}]


def test_options_become_the_chat_pipelines():
    req = _decode(BASE | {"max_output_tokens": 5, "temperature": 0, "top_p": 0.5, "stream": True,
                          "text": {"format": {"type": "json_schema", "name": "x", "schema": SCHEMA}},
                          "tools": [{"type": "function", "name": "f", "parameters": SCHEMA}],
                          "tool_choice": {"type": "function", "name": "f"}})
    p = responses.params(req, rq.OPENAI_SAMPLING)
    assert (p.max_tokens, p.sampling.temperature, p.sampling.top_p, p.stream, p.n) == (5, 0, 0.5, True, 1)
    assert isinstance(p.response_format, s.JsonSchemaFormat) and p.response_format.json_schema.schema == SCHEMA
    t = responses.tools(req)
    assert t is not None and t.constrained and t.forced_name == "f" and t.tools[0].parameters == SCHEMA


@pytest.mark.parametrize("body, param", [
    (BASE | {"input": []}, "input"),
    (BASE | {"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
    (BASE | {"input": [{"role": "user"}]}, "input[0].content"),
    (BASE | {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].type"),
    (BASE | {"previous_response_id": "resp_1"}, "previous_response_id"),
    (BASE | {"max_output_tokens": 0}, "max_output_tokens"),
    (BASE | {"temperature": 3}, "temperature"),
    (BASE | {"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    (BASE | {"tools": [{"type": "web_search"}]}, "tools[0].type"),
    (BASE | {"truncation": "auto"}, "truncation"),
    (BASE | {"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}},
     "tool_choice"),
    (BASE | {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[" * 1000}]},
     "input[0].arguments"),
])
def test_each_mistake_is_a_400_naming_its_field(body, param):
    with pytest.raises(ApiError) as e:
        req = _decode(body)
        responses.params(req, rq.OPENAI_SAMPLING), responses.tools(req), responses.messages(req)
    assert e.value.status == 400 and e.value.param == param, (e.value.param, e.value.message)


def _accepted(data: bytes) -> bool:
    try:
        req = rq.decode(data, r.ResponsesRequest)
        if req.model != "stories":
            return False
        responses.params(req, rq.OPENAI_SAMPLING), responses.tools(req), responses.messages(req)
    except ApiError:
        return False
    return True


def _unstated(body: dict) -> bool:
    """Rules no JSON schema states: a call's arguments JSON text, tool names distinct, a named
    tool_choice among the tools, strings without lone surrogates."""
    text = json.dumps(body)
    if any(f"\\ud{c}" in text for c in "89abcdef"):
        return True
    items = body.get("input") if isinstance(body.get("input"), list) else []
    if any(isinstance(i, dict) and i.get("type") == "function_call" for i in items):
        return True
    tools = body.get("tools")
    return isinstance(tools, list) and len(tools) > 1 or isinstance(body.get("tool_choice"), dict)


@pytest.mark.slow
def test_bodies_generated_from_the_document_are_decoded_as_it_says():
    check_generated_bodies("/v1/responses", "ResponsesRequest", _unstated, _accepted)
