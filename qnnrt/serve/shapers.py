"""A job's events become one endpoint's JSON, streamed (chunks) or whole (one body), for each of its
``n`` choices; a chat's tool calls are parsed out of the text as it comes."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from qnnrt.llm.text import TextTokenizer
from qnnrt.serve import openai_api as api
from qnnrt.serve import requests as rq
from qnnrt.serve.engine import ChoiceEvent, DoneEvent, Event, Job, TextEvent
from qnnrt.serve.tools import CallDelta, ContentDelta, Delta, ToolCall, ToolCallParser, ToolRequest


@dataclass
class ChoiceState:
    """What one choice has said so far."""
    parser: ToolCallParser | None
    content: list[str] = field(default_factory=list)
    logprobs: list[Any] = field(default_factory=list)
    finish_reason: str | None = None
    offset: int = 0                    # completions' text_offset

    def feed(self, text: str) -> list[Delta]:
        deltas: list[Delta] = self.parser.feed(text) if self.parser is not None else \
            ([ContentDelta(text)] if text else [])
        self.content += [d.text for d in deltas if isinstance(d, ContentDelta)]
        return deltas

    def flush(self) -> list[Delta]:
        deltas = self.parser.flush() if self.parser is not None else []
        self.content += [d.text for d in deltas if isinstance(d, ContentDelta)]
        return deltas

    @property
    def calls(self) -> list[ToolCall]:
        return self.parser.calls if self.parser is not None else []

    def finish(self, reason: str) -> str:
        """OpenAI's reason: "tool_calls" when the choice ended on its calls."""
        self.finish_reason = "tool_calls" if self.calls and reason == "stop" else reason
        return self.finish_reason


class Shaper:
    object_name = ""

    def __init__(self, model_id: str, tokenizer: TextTokenizer, job: Job, params: rq.Params,
                 tools: ToolRequest | None = None):
        self.model_id, self.tokenizer, self.job, self.params = model_id, tokenizer, job, params
        self.created = api.now()
        names = tools.names() if tools is not None else set()
        self.choices = [ChoiceState(ToolCallParser(names) if names else None) for _ in range(params.n)]

    def envelope(self, choices: list[dict[str, Any]], obj: str | None = None) -> dict[str, Any]:
        return {"id": self.job.request_id, "object": obj or self.object_name, "created": self.created,
                "model": self.model_id, "system_fingerprint": "qnnrt", "choices": choices}

    def token_texts(self, ev: TextEvent) -> tuple[str, list[tuple[str, float]]]:
        assert ev.logprob is not None
        top = ev.logprob.top
        texts = self.tokenizer.token_texts([ev.logprob.token] + [i for i, _ in top])
        return texts[0], [(t, lp) for t, (_, lp) in zip(texts[1:], top)]

    def usage(self, ev: DoneEvent) -> dict[str, Any]:
        return api.usage(ev.prompt_tokens, ev.completion_tokens, ev.cached_tokens)

    def wants_logprobs(self, ev: TextEvent) -> bool:
        return ev.logprob is not None and self.params.top_logprobs is not None

    def collect(self, ev: Event) -> None:
        """Whole bodies: keep what each choice said."""
        if isinstance(ev, TextEvent):
            c = self.choices[ev.index]
            if self.wants_logprobs(ev):
                c.logprobs.append(self.logprob_item(ev, c))
            c.feed(ev.text)
        elif isinstance(ev, ChoiceEvent):
            c = self.choices[ev.index]
            c.flush()
            c.finish(ev.finish_reason)

    def stream_start(self) -> list[dict[str, Any]]:
        return []

    def stream_error(self, error: api.ApiError) -> list[dict[str, Any]]:
        """What a stream says when it fails after it began (OpenAI's error object)."""
        return [error.body()]

    def stream_end(self) -> list[str]:
        return ["data: [DONE]\n\n"]

    def sse(self, chunk: dict[str, Any]) -> str:
        """One server-sent event of a chunk."""
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    def stream_event(self, ev: Event) -> list[dict[str, Any]]:
        if isinstance(ev, DoneEvent):
            return [self.envelope([]) | {"usage": self.usage(ev)}] if self.params.include_usage else []
        if isinstance(ev, ChoiceEvent):
            c = self.choices[ev.index]
            out = self.chunks(ev.index, c.flush(), None)
            return out + [self.envelope([self.final_chunk(ev.index, c.finish(ev.finish_reason))])]
        assert isinstance(ev, TextEvent)
        c = self.choices[ev.index]
        lp = self.logprob_item(ev, c) if self.wants_logprobs(ev) else None
        return self.chunks(ev.index, c.feed(ev.text), lp)

    def chunks(self, index: int, deltas: list[Delta], lp: Any) -> list[dict[str, Any]]:
        raise NotImplementedError

    def final_chunk(self, index: int, finish_reason: str) -> dict[str, Any]:
        raise NotImplementedError

    def logprob_item(self, ev: TextEvent, c: ChoiceState) -> Any:
        raise NotImplementedError

    def body(self, ev: DoneEvent) -> dict[str, Any]:
        raise NotImplementedError


class ChatShaper(Shaper):
    object_name = "chat.completion.chunk"

    def logprob_item(self, ev: TextEvent, c: ChoiceState) -> Any:
        assert ev.logprob is not None
        text, top = self.token_texts(ev)
        return api.chat_logprob_entry(text, ev.logprob.logprob, top)

    def _lp(self, items: list[Any]) -> dict[str, Any] | None:
        return {"content": items, "refusal": None} if self.params.top_logprobs is not None else None

    def stream_start(self) -> list[dict[str, Any]]:
        return [self.envelope([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                "finish_reason": None}]) for i in range(self.params.n)]

    def chunks(self, index: int, deltas: list[Delta], lp: Any) -> list[dict[str, Any]]:
        """A content delta per text, two tool-call deltas per call (id and name, then the
        arguments, as OpenAI streams them); the token's logprobs ride on the first."""
        out: list[dict[str, Any]] = []
        for d in deltas:
            if isinstance(d, ContentDelta):
                out.append({"content": d.text})
            elif isinstance(d, CallDelta):
                out.append({"tool_calls": [{"index": d.index, "id": d.call.id, "type": "function",
                                            "function": {"name": d.call.name, "arguments": ""}}]})
                out.append({"tool_calls": [{"index": d.index, "function": {"arguments": d.call.arguments}}]})
        if lp is not None and not out:
            out.append({"content": ""})
        return [self.envelope([{"index": index, "delta": delta,
                                "logprobs": self._lp([lp]) if lp is not None and i == 0 else None,
                                "finish_reason": None}]) for i, delta in enumerate(out)]

    def final_chunk(self, index: int, finish_reason: str) -> dict[str, Any]:
        return {"index": index, "delta": {}, "logprobs": None, "finish_reason": finish_reason}

    def body(self, ev: DoneEvent) -> dict[str, Any]:
        choices = []
        for i, c in enumerate(self.choices):
            content = "".join(c.content)
            message: dict[str, Any] = {"role": "assistant", "content": content if content or not c.calls else None,
                                       "refusal": None}
            if c.calls:
                message["tool_calls"] = [call.body() for call in c.calls]
            choices.append({"index": i, "message": message, "logprobs": self._lp(c.logprobs),
                            "finish_reason": c.finish_reason})
        return self.envelope(choices, "chat.completion") | {"usage": self.usage(ev)}


class CompletionShaper(Shaper):
    object_name = "text_completion"

    def logprob_item(self, ev: TextEvent, c: ChoiceState) -> Any:
        assert ev.logprob is not None
        text, top = self.token_texts(ev)
        item = (text, ev.logprob.logprob, dict(top), c.offset)
        c.offset += len(ev.text)
        return item

    def _lp(self, items: list[Any]) -> dict[str, Any] | None:
        if self.params.top_logprobs is None:
            return None
        return {"tokens": [i[0] for i in items], "token_logprobs": [i[1] for i in items],
                "top_logprobs": [i[2] for i in items], "text_offset": [i[3] for i in items]}

    def chunks(self, index: int, deltas: list[Delta], lp: Any) -> list[dict[str, Any]]:
        text = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
        if not text and lp is None:
            return []
        return [self.envelope([{"index": index, "text": text, "logprobs": self._lp([lp]) if lp is not None else None,
                                "finish_reason": None}])]

    def final_chunk(self, index: int, finish_reason: str) -> dict[str, Any]:
        return {"index": index, "text": "", "logprobs": None, "finish_reason": finish_reason}

    def body(self, ev: DoneEvent) -> dict[str, Any]:
        choices = [{"index": i, "text": "".join(c.content), "logprobs": self._lp(c.logprobs),
                    "finish_reason": c.finish_reason} for i, c in enumerate(self.choices)]
        return self.envelope(choices) | {"usage": self.usage(ev)}
