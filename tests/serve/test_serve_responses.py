"""OpenAI's Responses API (`client.responses.create`, streamed and not) and CORS on a live `qnnrt
serve`: the LLM fixture with the tokenizer whose template renders tools, started with
--cors-origin. Prompts and max_output_tokens stay small: the model runs on the HTP simulator."""
from __future__ import annotations

import json

import pytest

from tests.helpers.llm_text import tools_text_folder  # noqa: F401
from tests.serve.conftest import API_KEY, MODEL_ID, start_server

openai = pytest.importorskip("openai", reason="needs the openai client (pip install -e '.[test]')")
httpx = pytest.importorskip("httpx", reason="needs httpx (pip install -e '.[test]')")

pytestmark = pytest.mark.slow
ORIGIN = "http://ui.example:3000"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def server(tools_text_folder, tmp_path_factory):  # noqa: F811
    s = start_server(tools_text_folder, tmp_path_factory.mktemp("serve") / "report.json", "--api-key", API_KEY,
                     "--cors-origin", ORIGIN, "--cors-origin", "http://localhost:8080")
    yield s
    if s.proc.poll() is None:
        s.stop()


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)


def test_responses_whole_and_streamed_say_the_same(server):
    c = client(server)
    ask = dict(model=MODEL_ID, input="Once upon a time", instructions="Tell a story", max_output_tokens=4,
               temperature=0)
    whole = c.responses.create(**ask)
    assert whole.object == "response" and whole.status == "incomplete"
    assert whole.incomplete_details.reason == "max_output_tokens" and whole.usage.output_tokens == 4
    assert whole.output[0].type == "message" and whole.output[0].role == "assistant" and whole.output_text
    events = list(c.responses.create(**ask, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == whole.output_text
    assert events[-1].response.output_text == whole.output_text
    assert events[-1].response.usage.input_tokens == whole.usage.input_tokens


def test_a_conversation_of_items_with_a_function_call(server):
    c = client(server)
    tools = [{"type": "function", "name": "weather", "parameters": SCHEMA}]
    first = c.responses.create(model=MODEL_ID, input="Hi", tools=tools, tool_choice="required",
                               max_output_tokens=90, temperature=0)
    calls = [o for o in first.output if o.type == "function_call"]
    assert first.status == "completed" and calls and calls[0].name == "weather"
    assert json.loads(calls[0].arguments) in ({"ok": True}, {"ok": False})      # the grammar held
    follow = c.responses.create(model=MODEL_ID, max_output_tokens=2, temperature=0, input=[
        {"role": "user", "content": "Hi"}, calls[0].model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "y"}])
    assert follow.usage.input_tokens > first.usage.input_tokens and follow.usage.output_tokens <= 2
    streamed = list(c.responses.create(model=MODEL_ID, input="Hi", tools=tools, tool_choice="required",
                                       max_output_tokens=90, temperature=0, stream=True))
    kinds = [e.type for e in streamed]
    assert "response.function_call_arguments.done" in kinds and kinds[-1] == "response.completed"
    done = next(e for e in streamed if e.type == "response.function_call_arguments.done")
    assert done.arguments == calls[0].arguments


def test_text_format_json_schema_is_decoded_under_the_grammar(server):
    r = client(server).responses.create(model=MODEL_ID, input="Say", max_output_tokens=60, temperature=0,
                                        text={"format": {"type": "json_schema", "name": "ok", "schema": SCHEMA}})
    assert r.status == "completed" and isinstance(json.loads(r.output_text)["ok"], bool)


def test_responses_errors_are_openai_shaped_and_published(server):
    c = client(server)
    with pytest.raises(openai.BadRequestError, match="stores no responses"):
        c.responses.create(model=MODEL_ID, input="x", previous_response_id="resp_1")
    with pytest.raises(openai.BadRequestError, match="input_image"):
        c.responses.create(model=MODEL_ID, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "http://x/y.png"}]}])
    with pytest.raises(openai.BadRequestError, match="at most 96"):
        c.responses.create(model=MODEL_ID, input="cat " * 120)
    doc = httpx.get(server.base + "/openapi.json", headers=AUTH, timeout=30).json()
    assert "/v1/responses" in doc["paths"] and "ResponsesRequest" in doc["components"]["schemas"]


def test_cors_preflight_from_an_allowed_origin_is_answered(server):
    pre = httpx.options(server.base + "/v1/chat/completions", timeout=30, headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert pre.status_code == 200, pre.text
    assert pre.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in pre.headers["access-control-allow-methods"]
    assert "authorization" in pre.headers["access-control-allow-headers"].lower()
    r = httpx.get(server.base + "/v1/models", headers=AUTH | {"Origin": ORIGIN}, timeout=30)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    bad = httpx.options(server.base + "/v1/chat/completions", timeout=30, headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert bad.status_code == 400 and "access-control-allow-origin" not in bad.headers
    r = httpx.get(server.base + "/v1/models", headers=AUTH | {"Origin": "http://evil.example"}, timeout=30)
    assert "access-control-allow-origin" not in r.headers
    assert httpx.get(server.base + "/v1/models", headers={"Origin": ORIGIN}, timeout=30).status_code == 401
