"""OpenAI's Responses API (`POST /v1/responses`) as typed schemas, beside serve/schema.py's: the
request decoded into them, the reply published from them (/openapi.json). Text in and out,
`instructions`, multi-turn `input` items (messages, function calls and their outputs), function tools,
`text.format` (json_object / json_schema), `max_output_tokens`, streaming. Nothing is stored, so
`previous_response_id` is refused (send the whole conversation). Plain data."""
from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from msgspec import Meta, Struct

from qnnrt.serve.schema import Body, FunctionDefinition, JsonObject, Positive, Reply, check_depth

MAX_INPUT_ITEMS = 4096


# -- input items -------------------------------------------------------------------------------------
class InputText(Body, tag_field="type", tag="input_text", frozen=True):
    text: str


class OutputText(Body, tag_field="type", tag="output_text", frozen=True):
    """An earlier reply's text, sent back as part of the conversation."""
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class RefusalPart(Body, tag_field="type", tag="refusal", frozen=True):
    refusal: str


ContentPart = InputText | OutputText | RefusalPart
ItemContent = str | list[ContentPart]


class InputItem(Body, frozen=True):
    """One item of the conversation: a message (`type` may be left out, as OpenAI allows), an
    earlier function call, or a call's output. One struct, checked by kind once decoded."""
    type: Literal["message", "function_call", "function_call_output"] = "message"
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: ItemContent | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: Annotated[str, Meta(description="a function_call's arguments as JSON text")] | None = None
    output: str | list[InputText] | None = None
    id: str | None = None
    status: str | None = None

    NEEDS: ClassVar[dict[str, tuple[str, ...]]] = {"message": ("role", "content"),
                                                  "function_call": ("call_id", "name", "arguments"),
                                                  "function_call_output": ("call_id", "output")}

    def __post_init__(self) -> None:
        for name in self.NEEDS[self.type]:
            if getattr(self, name) is None:
                raise ValueError(f"{name}: required in an item of type {self.type}")


# -- tools and formats -------------------------------------------------------------------------------
def _item_rules() -> dict[str, Any]:
    """InputItem.NEEDS as JSON schema: each kind's required fields (a message when `type` is absent)."""
    rules = []
    for kind, names in InputItem.NEEDS.items():
        is_kind: dict[str, Any] = {"properties": {"type": {"const": kind}}, "required": ["type"]}
        if kind == "message":
            is_kind = {"anyOf": [is_kind, {"not": {"required": ["type"]}}]}
        rules.append({"if": is_kind, "then": {"required": list(names),
                                              "properties": {n: {"not": {"type": "null"}} for n in names}}})
    return {"allOf": rules}


Item = Annotated[InputItem, Meta(extra_json_schema=_item_rules())]


# a function tool as the Responses API sends it: chat's function definition, flat, tagged (no docstring:
# it would be a description the published document did not have)
class FunctionTool(FunctionDefinition, tag_field="type", tag="function", frozen=True):
    pass


class NamedFunction(Body, frozen=True):
    type: Literal["function"]
    name: str


class TextFormatText(Body, tag_field="type", tag="text", frozen=True):
    pass


class TextFormatJsonObject(Body, tag_field="type", tag="json_object", frozen=True):
    pass


class TextFormatJsonSchema(Body, tag_field="type", tag="json_schema", frozen=True):
    name: str
    schema: Annotated[JsonObject, Meta(description="the JSON schema every reply validates against")]
    description: str | None = None
    strict: bool | None = None

    def __post_init__(self) -> None:
        check_depth("schema", self.schema)


TextFormat = TextFormatText | TextFormatJsonObject | TextFormatJsonSchema


class TextOptions(Body, frozen=True):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponsesRequest(Body, frozen=True):
    model: str
    input: str | Annotated[list[Item], Meta(min_length=1, max_length=MAX_INPUT_ITEMS)]
    instructions: str | None = None
    max_output_tokens: Positive | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    stream: bool | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedFunction | None = None
    parallel_tool_calls: bool | None = None
    text: TextOptions | None = None
    truncation: Literal["disabled"] | None = None
    store: Annotated[bool, Meta(description="accepted; nothing is stored")] | None = None
    metadata: Annotated[dict[Annotated[str, Meta(max_length=64)], Annotated[str, Meta(max_length=512)]],
                        Meta(max_length=16)] | None = None
    user: str | None = None
    safety_identifier: str | None = None


# -- the reply (published; serve/responses.py builds it) --------------------------------------------
class ReplyOutputText(Reply, frozen=True):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]


class ReplyMessageItem(Reply, tag_field="type", tag="message", frozen=True):
    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    role: Literal["assistant"]
    content: list[ReplyOutputText]


class ReplyFunctionCall(Reply, tag_field="type", tag="function_call", frozen=True):
    id: str
    call_id: str
    name: str
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"]


class InputTokensDetails(Reply, frozen=True):
    cached_tokens: int


class OutputTokensDetails(Reply, frozen=True):
    reasoning_tokens: int


class ResponseUsage(Reply, frozen=True):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(Reply, frozen=True):
    reason: Literal["max_output_tokens"]


class Response(Reply, frozen=True):
    """A response, whole; streamed, the events carry it (response.created, ..., response.completed)."""
    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    model: str
    output: list[ReplyMessageItem | ReplyFunctionCall]
    error: Any
    incomplete_details: IncompleteDetails | None
    instructions: str | None
    max_output_tokens: int | None
    temperature: float | None
    top_p: float | None
    tool_choice: Any
    tools: list[Any]
    parallel_tool_calls: bool
    text: Any
    metadata: dict[str, str]
    usage: ResponseUsage | None


class ResponseEvent(Struct, frozen=True, kw_only=True):
    """One server-sent event of a streamed response: `event: <type>` and `data: {"type": <type>, ...}`
    (response.created, response.in_progress, response.output_item.added, response.content_part.added,
    response.output_text.delta / .done, response.function_call_arguments.delta / .done,
    response.content_part.done, response.output_item.done, response.completed / .incomplete, error)."""
    type: str
    sequence_number: int
