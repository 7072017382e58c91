"""OpenAI's Responses API on the chat pipeline: a ResponsesRequest (serve/schema_responses.py) becomes
the messages a chat template renders, the tools, the sampling and output options a chat has; the
job's events become a Response object, or its stream of typed events (`event: response.*`). One
choice; tool calls and `text.format` go through the same constrained decoding as chat. No HTTP."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Sequence, cast

from qnnrt.llm.sampling import SamplingOptions
from qnnrt.serve import openai_api as api
from qnnrt.serve import requests as rq
from qnnrt.serve import schema as s
from qnnrt.serve import schema_responses as r
from qnnrt.serve.engine import ChoiceEvent, DoneEvent, Event, Job, TextEvent
from qnnrt.serve.shapers import Shaper
from qnnrt.serve.requests import bad
from qnnrt.serve.tools import NO_PARAMETERS, CallDelta, ContentDelta, Delta, FunctionTool, ToolRequest


# -- the request --------------------------------------------------------------------------------------
def _text(content: r.ItemContent | str | list[r.InputText] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.refusal if isinstance(p, r.RefusalPart) else p.text for p in content)


def messages(req: r.ResponsesRequest) -> list[dict[str, Any]]:
    """The conversation as a chat template reads it: `instructions` first as the system message, then
    the input items (an assistant's function calls joined into one message, a call's output a tool
    message)."""
    out: list[dict[str, Any]] = []
    if req.instructions:
        out.append({"role": "system", "content": req.instructions})
    items = [r.InputItem(role="user", content=req.input)] if isinstance(req.input, str) else req.input
    for i, it in enumerate(items):
        if it.type == "message":
            out.append({"role": "system" if it.role == "developer" else it.role, "content": _text(it.content)})
        elif it.type == "function_call":
            assert it.arguments is not None
            call = {"id": it.call_id, "type": "function", "function": {
                "name": it.name, "arguments": rq.json_value(it.arguments, f"input[{i}].arguments")}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and (last.get("tool_calls") or not last["content"]):
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        else:
            out.append({"role": "tool", "tool_call_id": it.call_id, "content": _text(it.output)})
    return out


def tools(req: r.ResponsesRequest) -> ToolRequest | None:
    if not req.tools:
        return None
    tools = tuple(FunctionTool(t.name, t.description or "", t.parameters if t.parameters is not None
                               else NO_PARAMETERS) for t in req.tools)
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise bad("tools", "two tools have the same name")
    choice = req.tool_choice
    parallel = req.parallel_tool_calls is not False
    if isinstance(choice, r.NamedFunction):
        if choice.name not in names:
            raise bad("tool_choice", f"no tool named {choice.name[:100]!r} in tools")
        return ToolRequest(tools, "function", choice.name, parallel)
    return ToolRequest(tools, choice or "auto", None, parallel)


def response_format(req: r.ResponsesRequest) -> s.ResponseFormat | None:
    """`text.format` in chat's terms (the same grammar compiler)."""
    f = req.text.format if req.text is not None else None
    if isinstance(f, r.TextFormatJsonObject):
        return s.JsonObjectFormat()
    if isinstance(f, r.TextFormatJsonSchema):
        return s.JsonSchemaFormat(json_schema=s.JsonSchemaSpec(name=f.name, schema=f.schema,
                                                               description=f.description, strict=f.strict))
    return None


def params(req: r.ResponsesRequest, defaults: SamplingOptions, default_stops: Sequence[str] = ()) -> rq.Params:
    """`defaults` (a Genie bundle's sampler, else OpenAI's) with the request's temperature and top_p;
    `default_stops` (a Genie bundle's stop-sequence: the Responses API has no stop field)."""
    sampling = replace(defaults, temperature=defaults.temperature if req.temperature is None else req.temperature,
                       top_p=defaults.top_p if req.top_p is None else req.top_p)
    return rq.Params(max_tokens=req.max_output_tokens, sampling=sampling, n=1, stops=[x for x in default_stops if x],
                     top_logprobs=None, stream=bool(req.stream), include_usage=False,
                     response_format=response_format(req))


# -- the reply ----------------------------------------------------------------------------------------
class ResponsesShaper(Shaper):
    """A job's events as a Response (whole) or as the Responses API's typed stream."""
    object_name = "response"

    def __init__(self, model_id: str, tokenizer: Any, job: Job, p: rq.Params, tool_req: ToolRequest | None,
                 req: r.ResponsesRequest):
        super().__init__(model_id, tokenizer, job, p, tool_req)
        self.req, self.seq = req, 0
        self.items: list[dict[str, Any]] = []       # the output so far: message and function_call items
        self.text_item: dict[str, Any] | None = None
        self.status, self.incomplete = "in_progress", cast("dict[str, str] | None", None)

    # the Response object
    def response(self, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        req = self.req
        fmt = req.text.format if req.text is not None and req.text.format is not None else r.TextFormatText()
        return {"id": self.job.request_id, "object": "response", "created_at": self.created, "status": self.status,
                "model": self.model_id, "output": self.items, "error": None,
                "incomplete_details": self.incomplete, "instructions": req.instructions,
                "max_output_tokens": req.max_output_tokens, "temperature": self.params.sampling.temperature,
                "top_p": self.params.sampling.top_p, "parallel_tool_calls": req.parallel_tool_calls is not False,
                "tool_choice": _plain(req.tool_choice) if req.tool_choice is not None else "auto",
                "tools": [_plain(t) | {"type": "function"} for t in req.tools or []],
                "text": {"format": _plain(fmt) | {"type": type(fmt).__struct_config__.tag}},
                "metadata": dict(req.metadata or {}), "usage": usage}

    def usage(self, ev: DoneEvent) -> dict[str, Any]:
        return {"input_tokens": ev.prompt_tokens, "input_tokens_details": {"cached_tokens": ev.cached_tokens},
                "output_tokens": ev.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": ev.prompt_tokens + ev.completion_tokens}

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq - 1, **fields}

    def sse(self, chunk: dict[str, Any]) -> str:
        return f"event: {chunk['type']}\ndata: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    def stream_end(self) -> list[str]:
        return []

    def stream_error(self, error: api.ApiError) -> list[dict[str, Any]]:
        e = error.body()["error"]
        return [self.event("error", code=e["code"], message=e["message"], param=e["param"])]

    # the items, as text and calls come
    def deltas(self, deltas: list[Delta]) -> list[dict[str, Any]]:
        out = []
        for d in deltas:
            if isinstance(d, ContentDelta) and d.text:
                out += self.open_text()
                assert self.text_item is not None
                self.text_item["content"][0]["text"] += d.text
                out.append(self.event("response.output_text.delta", item_id=self.text_item["id"],
                                      output_index=len(self.items) - 1, content_index=0, delta=d.text, logprobs=[]))
            elif isinstance(d, CallDelta):
                out += self.close_text()
                item = {"type": "function_call", "id": api.new_id("fc"), "call_id": d.call.id, "name": d.call.name,
                        "arguments": d.call.arguments, "status": "completed"}
                self.items.append(item)
                at = len(self.items) - 1
                out += [self.event("response.output_item.added", output_index=at,
                                   item=item | {"arguments": "", "status": "in_progress"}),
                        self.event("response.function_call_arguments.delta", item_id=item["id"], output_index=at,
                                   delta=item["arguments"]),
                        self.event("response.function_call_arguments.done", item_id=item["id"], output_index=at,
                                   name=item["name"], arguments=item["arguments"]),
                        self.event("response.output_item.done", output_index=at, item=item)]
        return out

    def open_text(self) -> list[dict[str, Any]]:
        if self.text_item is not None:
            return []
        self.text_item = {"type": "message", "id": api.new_id("msg"), "status": "in_progress", "role": "assistant",
                          "content": [{"type": "output_text", "text": "", "annotations": []}]}
        self.items.append(self.text_item)
        at = len(self.items) - 1
        return [self.event("response.output_item.added", output_index=at,
                           item=self.text_item | {"content": []}),
                self.event("response.content_part.added", item_id=self.text_item["id"], output_index=at,
                           content_index=0, part={"type": "output_text", "text": "", "annotations": []})]

    def close_text(self) -> list[dict[str, Any]]:
        item = self.text_item
        if item is None:
            return []
        self.text_item = None
        item["status"] = "incomplete" if self.choices[0].finish_reason == "length" else "completed"
        at, part = self.items.index(item), item["content"][0]
        return [self.event("response.output_text.done", item_id=item["id"], output_index=at, content_index=0,
                           text=part["text"], logprobs=[]),
                self.event("response.content_part.done", item_id=item["id"], output_index=at, content_index=0,
                           part=part),
                self.event("response.output_item.done", output_index=at, item=item)]

    # the Shaper's interface
    def stream_start(self) -> list[dict[str, Any]]:
        return [self.event("response.created", response=self.response()),
                self.event("response.in_progress", response=self.response())]

    def stream_event(self, ev: Event) -> list[dict[str, Any]]:
        c = self.choices[0]
        if isinstance(ev, TextEvent):
            return self.deltas(c.feed(ev.text))
        if isinstance(ev, ChoiceEvent):
            out = self.deltas(c.flush())
            self.finish(ev.finish_reason)
            return out + self.close_text()
        assert isinstance(ev, DoneEvent)
        kind = "response.completed" if self.status == "completed" else "response.incomplete"
        return [self.event(kind, response=self.response(self.usage(ev)))]

    def finish(self, reason: str) -> None:
        self.choices[0].finish(reason)
        if reason == "length":
            self.status, self.incomplete = "incomplete", {"reason": "max_output_tokens"}
        else:
            self.status = "completed"

    def collect(self, ev: Event) -> None:
        if not isinstance(ev, DoneEvent):
            self.stream_event(ev)

    def body(self, ev: DoneEvent) -> dict[str, Any]:
        return self.response(self.usage(ev))


def _plain(x: Any) -> Any:
    import msgspec
    return msgspec.to_builtins(x)
