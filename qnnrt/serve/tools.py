"""Tool calls: the request's `tools` and `tool_choice`, how the prompt shows them, the grammar of a
forced call, and the parser that turns generated text into OpenAI `tool_calls`.

A call is written as Hermes / Qwen / SmolLM3 templates teach it: ``<tool_call>`` then a JSON object
``{"name": ..., "arguments": {...}}`` then ``</tool_call>``. A template that takes ``tools`` renders
them itself (as transformers does with ``tools=``); for one that does not, a system message
describes them in that syntax. A forced or required call is decoded under the grammar of the
tools' parameters, so its arguments always validate; under "auto" the model writes what it will
and the calls it wrote are parsed out of the text."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from qnnrt.llm.detokenize import partial_suffix
from qnnrt.llm.grammar import JSON_OPTIONS
from qnnrt.serve import schema as s
from qnnrt.serve.requests import bad

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class FunctionTool:
    name: str
    description: str
    parameters: dict[str, Any]

    def as_template_tool(self) -> dict[str, Any]:
        """The shape transformers passes a template in ``tools``."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


@dataclass(frozen=True)
class ToolRequest:
    tools: tuple[FunctionTool, ...]
    choice: str                      # "auto" | "none" | "required" | "function" (forced_name)
    forced_name: str | None
    parallel: bool

    @property
    def constrained(self) -> bool:
        """The output must be tool calls (decoded under their grammar)."""
        return self.choice in ("required", "function")

    @property
    def offered(self) -> tuple[FunctionTool, ...]:
        """The tools the model may call ("none": no tool, so the prompt shows none)."""
        if self.choice == "none":
            return ()
        if self.forced_name is not None:
            return tuple(t for t in self.tools if t.name == self.forced_name)
        return self.tools

    def names(self) -> set[str]:
        return {t.name for t in self.offered}


def parse_tools(req: s.ChatRequest) -> ToolRequest | None:
    """The request's tools (None when it has none)."""
    if not req.tools:
        return None
    tools = tuple(FunctionTool(t.function.name, t.function.description or "",
                               t.function.parameters if t.function.parameters is not None else NO_PARAMETERS)
                  for t in req.tools)
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise bad("tools", "two tools have the same name")
    choice = req.tool_choice
    if isinstance(choice, s.NamedToolChoice):
        if choice.function.name not in names:
            raise bad("tool_choice", f"no tool named {choice.function.name[:100]!r} in tools")
        return ToolRequest(tools, "function", choice.function.name, req.parallel_tool_calls is not False)
    return ToolRequest(tools, choice or "auto", None, req.parallel_tool_calls is not False)


# -- the prompt --------------------------------------------------------------------------------------
def template_renders_tools(template: str | None) -> bool:
    return bool(template) and "tools" in str(template)


def tools_system_text(tools: tuple[FunctionTool, ...]) -> str:
    """How the tools are shown to a template that cannot render them itself."""
    sigs = "\n".join(json.dumps(t.as_template_tool(), ensure_ascii=False) for t in tools)
    return ("These functions are available; their signatures are JSON schemas, one per line, between "
            f"<tools> and </tools>:\n<tools>\n{sigs}\n</tools>\nTo call one, answer with "
            f'{TOOL_OPEN}\n{{"name": "<the function\'s name>", "arguments": {{<its arguments>}}}}\n{TOOL_CLOSE}\n'
            "once per call.")


def call_text(name: str, arguments: Any) -> str:
    return f"{TOOL_OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{TOOL_CLOSE}"


def messages_for_plain_template(messages: list[dict[str, Any]],
                                tools: tuple[FunctionTool, ...]) -> list[dict[str, Any]]:
    """For a template without tool support: the tools in the system message, an assistant's calls
    written as text in its content (a tool message keeps its role and content)."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = "\n".join(call_text(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"])
            m = {"role": m["role"], "content": (m["content"] + "\n" if m["content"] else "") + calls}
        out.append(m)
    if not tools:
        return out
    text = tools_system_text(tools)
    if out and out[0]["role"] == "system":
        return [{"role": "system", "content": f"{out[0]['content']}\n\n{text}"}, *out[1:]]
    return [{"role": "system", "content": text}, *out]


# -- the grammar of a forced call --------------------------------------------------------------------
def call_schema(tool: FunctionTool) -> dict[str, Any]:
    return {"type": "object", "properties": {"name": {"const": tool.name}, "arguments": tool.parameters},
            "required": ["name", "arguments"], "additionalProperties": False}


def forced_call_lark(req: ToolRequest) -> str:
    """Lark for llguidance: one call (or, with parallel_tool_calls, one or more) of the offered
    tools, each the JSON of its name and arguments."""
    schemas = [call_schema(t) for t in req.offered]
    one = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    one = one | {"x-guidance": JSON_OPTIONS}
    more = ' ("\\n" call)*' if req.parallel else ""
    return (f"start: call{more}\n"
            f"call: {json.dumps(TOOL_OPEN + chr(10))} %json {json.dumps(one)} {json.dumps(chr(10) + TOOL_CLOSE)}\n")


# -- the reply ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str                    # JSON text, as the API sends it

    def body(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class CallDelta:
    index: int
    call: ToolCall


Delta = ContentDelta | CallDelta


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class ToolCallParser:
    """Generated text in, content and whole tool calls out, as the text streams. Text that may be
    the start of ``<tool_call>`` is held back until it is decided; a block that does not parse as a
    call of an offered tool is content after all; whitespace around calls is dropped."""

    def __init__(self, names: set[str]):
        self.names = names
        self.calls: list[ToolCall] = []
        self._pending = ""             # content held back: a possible beginning of TOOL_OPEN
        self._block: str | None = None  # text inside an open <tool_call>

    def feed(self, text: str) -> list[Delta]:
        out: list[Delta] = []
        buf = self._pending + text
        self._pending = ""
        while buf:
            if self._block is not None:
                end = (self._block + buf).find(TOOL_CLOSE)
                if end < 0:
                    self._block += buf
                    return out
                whole = self._block + buf
                self._block, buf = None, whole[end + len(TOOL_CLOSE):]
                out += self._close(whole[:end])
                continue
            start = buf.find(TOOL_OPEN)
            if start >= 0:
                out += self._content(buf[:start], before_call=True)
                self._block, buf = "", buf[start + len(TOOL_OPEN):]
                continue
            hold = partial_suffix(buf, [TOOL_OPEN])
            out += self._content(buf[:len(buf) - hold], before_call=False)
            self._pending += buf[len(buf) - hold:]
            break
        return out

    def flush(self) -> list[Delta]:
        """At the end: an unfinished block is content; whitespace after calls is dropped."""
        tail = self._pending + (TOOL_OPEN + self._block if self._block is not None else "")
        self._pending, self._block = "", None
        if self.calls and not tail.strip():
            return []
        return [ContentDelta(tail)] if tail else []

    def _content(self, text: str, before_call: bool) -> list[Delta]:
        """Content, less whitespace that only separates calls."""
        if not text or (not text.strip() and (self.calls or before_call)):
            return []
        return [ContentDelta(text)]

    def _close(self, inner: str) -> list[Delta]:
        call = self._parse(inner)
        if call is None:
            return [ContentDelta(TOOL_OPEN + inner + TOOL_CLOSE)]
        self.calls.append(call)
        return [CallDelta(len(self.calls) - 1, call)]

    def _parse(self, inner: str) -> ToolCall | None:
        try:
            obj = json.loads(inner)
        except (ValueError, RecursionError):        # the model's text: any nesting the context allows
            return None
        if not isinstance(obj, dict) or obj.get("name") not in self.names:
            return None
        args = obj.get("arguments", obj.get("parameters", {}))
        return ToolCall(new_call_id(), obj["name"], json.dumps(args, ensure_ascii=False))
