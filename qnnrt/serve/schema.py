"""The API's bodies as typed schemas (msgspec Structs): every request body is decoded into one of
these, and /openapi.json is generated from them (serve/openapi.py), so what is validated and what is
published are one definition. A field here is accepted; a field that is not is refused (400 naming
it). Bounds that depend on the served model (the vocabulary, the embedding width, the model ids) are
checked against the model by serve/requests.py and written into the published document there.

Plain data: no HTTP, no model. Field names are the wire names."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from msgspec import Meta, Struct

MAX_CHOICES = 16
MAX_STOPS = 4
MAX_TOP_LOGPROBS = 20          # chat; completions allow 5
MAX_COMPLETION_LOGPROBS = 5
MAX_LOGIT_BIAS = 300           # entries, as OpenAI allows
MAX_EMBEDDING_INPUTS = 2048    # as OpenAI allows
MAX_METADATA = 16              # pairs; keys <= 64 characters, values <= 512, as OpenAI allows
MAX_JSON_DEPTH = 64            # nesting of the free-form JSON a request carries (schemas, tool arguments)
UNSUPPORTED = "is not supported by this server"

Int64 = Annotated[int, Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
Positive = Annotated[int, Meta(ge=1, le=(1 << 63) - 1)]
TokenId = Annotated[int, Meta(ge=0, description="a token id of the model")]
JsonObject = dict[str, Any]


def json_depth_ok(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether decoded JSON nests at most ``limit`` objects / arrays deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if children is None:
            continue
        if depth > limit:
            return False
        stack.extend((c, depth + 1) for c in children)
    return True


def check_depth(name: str, value: Any) -> None:
    if value is not None and not json_depth_ok(value):
        raise ValueError(f"{name}: nests deeper than {MAX_JSON_DEPTH} levels")


@dataclass(frozen=True)
class Needs:
    """A rule between two fields of a request: `field`, set to anything but `unless`, needs `other`
    to be `value` (None: a non-empty list). The decoder checks it; the published schema says it."""
    field: str
    other: str
    value: Any = None
    unless: tuple[Any, ...] = (None,)

    def check(self, req: Any) -> None:
        if getattr(req, self.field) in self.unless:
            return
        got = getattr(req, self.other)
        if not (bool(got) if self.value is None else got == self.value):
            want = "a non-empty list" if self.value is None else json_text(self.value)
            raise ValueError(f"{self.field}: requires {self.other}: {want}")

    def json_schema(self) -> dict[str, Any]:
        want = {"type": "array", "minItems": 1} if self.value is None else {"const": self.value}
        return {"if": {"required": [self.field], "properties": {self.field: {"not": {"enum": list(self.unless)}}}},
                "then": {"required": [self.other], "properties": {self.other: want}}}


def json_text(value: Any) -> str:
    return {True: "true", False: "false", None: "null"}.get(value, repr(value)) if not isinstance(value, str) \
        else f'"{value}"'


class Body(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request body or a part of one: unknown fields are refused; `rules` are checked once it is
    decoded."""
    rules: ClassVar[tuple[Needs, ...]] = ()

    def __post_init__(self) -> None:
        for rule in self.rules:
            rule.check(self)


# -- messages ---------------------------------------------------------------------------------------
class TextPart(Body, frozen=True):
    type: Literal["text"]
    text: str


Content = str | list[TextPart]


class FunctionCall(Body, frozen=True):
    name: str
    arguments: Annotated[str, Meta(description="the arguments as JSON text, as the model wrote them")]


class MessageToolCall(Body, frozen=True):
    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


class SystemMessage(Body, tag_field="role", tag="system", frozen=True):
    content: Content
    name: str | None = None


class DeveloperMessage(Body, tag_field="role", tag="developer", frozen=True):
    """OpenAI's newer name for a system message (rendered as one)."""
    content: Content
    name: str | None = None


class UserMessage(Body, tag_field="role", tag="user", frozen=True):
    content: Content
    name: str | None = None


class AssistantMessage(Body, tag_field="role", tag="assistant", frozen=True):
    content: Content | None = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None
    refusal: str | None = None


class ToolMessage(Body, tag_field="role", tag="tool", frozen=True):
    content: Content
    tool_call_id: Annotated[str, Meta(description="the id of the call this message answers")]


Message = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage


# -- tools and output formats ------------------------------------------------------------------------
class FunctionDefinition(Body, frozen=True):
    name: Annotated[str, Meta(min_length=1)]
    description: str | None = None
    parameters: Annotated[JsonObject, Meta(description="a JSON schema of the arguments")] | None = None
    strict: bool | None = None

    def __post_init__(self) -> None:
        check_depth("parameters", self.parameters)


class Tool(Body, frozen=True):
    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(Body, frozen=True):
    name: str


class NamedToolChoice(Body, frozen=True):
    type: Literal["function"]
    function: FunctionName


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


class TextFormat(Body, tag_field="type", tag="text", frozen=True):
    pass


class JsonObjectFormat(Body, tag_field="type", tag="json_object", frozen=True):
    pass


class JsonSchemaSpec(Body, frozen=True):
    name: str
    schema: Annotated[JsonObject, Meta(description="the JSON schema every reply validates against")] | None = None
    description: str | None = None
    strict: bool | None = None

    def __post_init__(self) -> None:
        check_depth("schema", self.schema)


class JsonSchemaFormat(Body, tag_field="type", tag="json_schema", frozen=True):
    json_schema: JsonSchemaSpec


ResponseFormat = TextFormat | JsonObjectFormat | JsonSchemaFormat


class StreamOptions(Body, frozen=True):
    include_usage: bool | None = None


# -- generation requests -----------------------------------------------------------------------------
LogitBias = Annotated[
    dict[TokenId, Annotated[float, Meta(ge=-100, le=100)]],
    Meta(max_length=MAX_LOGIT_BIAS, description="token id (a decimal string) -> bias added to its logit",
         extra_json_schema={"propertyNames": {"pattern": "^(?:0|[1-9][0-9]*)$"}})]
Stop = str | Annotated[list[str], Meta(max_length=MAX_STOPS)]


STREAM_OPTIONS = Needs("stream_options", "stream", True)


class GenerationRequest(Body, frozen=True):
    """What both generation endpoints take: OpenAI's sampling and output fields, and llama-server's
    top_k, min_p and repetition_penalty."""
    model: str
    max_tokens: Positive | None = None
    n: Annotated[int, Meta(ge=1, le=MAX_CHOICES)] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=0, le=(1 << 63) - 1, description="0: off; at most the vocabulary size")] | None = None
    min_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    presence_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Meta(ge=-2, le=2)] | None = None
    repetition_penalty: Annotated[float, Meta(gt=0, le=10)] | None = None
    seed: Int64 | None = None
    logit_bias: LogitBias | None = None
    stop: Stop | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    user: str | None = None


class ChatRequest(GenerationRequest, kw_only=True, frozen=True):
    messages: Annotated[list[Message], Meta(min_length=1)]
    max_completion_tokens: Positive | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    metadata: Annotated[dict[Annotated[str, Meta(max_length=64)], Annotated[str, Meta(max_length=512)]],
                        Meta(max_length=MAX_METADATA)] | None = None
    safety_identifier: str | None = None
    rules = (STREAM_OPTIONS, Needs("top_logprobs", "logprobs", True),
             Needs("tool_choice", "tools", None, (None, "none")))


PromptItem = str | TokenId


class CompletionRequest(GenerationRequest, kw_only=True, frozen=True):
    prompt: Annotated[str | Annotated[list[PromptItem], Meta(min_length=1)], Meta(
        description="a string, a list of one string, or a list of token ids (one prompt: batches are not served)",
        extra_json_schema={"oneOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 1},
            {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}]})]
    logprobs: Annotated[int, Meta(ge=0, le=MAX_COMPLETION_LOGPROBS)] | None = None
    best_of: Annotated[Literal[1], Meta(description="one candidate per choice")] | None = None
    echo: Annotated[Literal[False], Meta(description="echoing the prompt is not served")] | None = None
    rules = (STREAM_OPTIONS,)

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.prompt, list):      # the schema's oneOf, which the decoded type is wider than
            kinds = {type(p) for p in self.prompt}
            if kinds == {str} and len(self.prompt) > 1:
                raise ValueError(f"prompt: a batch of prompts {UNSUPPORTED} (send one)")
            if len(kinds) > 1:
                raise ValueError("prompt: expected a string, a list of one string, or a list of token ids")


EmbeddingItem = str | TokenId | Annotated[list[TokenId], Meta(min_length=1)]
_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}
_MANY = {"minItems": 1, "maxItems": MAX_EMBEDDING_INPUTS}


class EmbeddingsRequest(Body, frozen=True):
    model: str
    input: Annotated[str | Annotated[list[EmbeddingItem], Meta(min_length=1)], Meta(
        description="a text, texts, token ids (one input) or lists of token ids, as OpenAI's API takes them",
        extra_json_schema={"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}} | _MANY, _IDS,
                                     {"type": "array", "items": _IDS} | _MANY]})]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: Annotated[int, Meta(ge=1, description="only the model's own")] | None = None
    truncate: Annotated[bool, Meta(description="cut an input past the model's sequence (text-embeddings-inference's "
                                               "name); else such an input is a 400")] | None = None
    user: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        kinds = {type(x) for x in self.input} if isinstance(self.input, list) else {int}   # the schema's oneOf:
        if len(kinds) > 1:
            raise ValueError("input: expected a string, strings, token ids, or lists of token ids")
        if kinds != {int} and len(self.input) > MAX_EMBEDDING_INPUTS:      # token ids are one input
            raise ValueError(f"input: more than {MAX_EMBEDDING_INPUTS} inputs")


# -- responses (published; the shapers build them) ---------------------------------------------------
class Reply(Struct, frozen=True, kw_only=True):
    """A response body or a part of one."""


class ErrorDetail(Reply, frozen=True):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(Reply, frozen=True):
    error: ErrorDetail


class PromptTokensDetails(Reply, frozen=True):
    cached_tokens: int


class Usage(Reply, frozen=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class TopLogprob(Reply, frozen=True):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob, frozen=True):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(Reply, frozen=True):
    content: list[TokenLogprob]
    refusal: None


class ReplyFunction(Reply, frozen=True):
    name: str
    arguments: str


class ReplyToolCall(Reply, frozen=True):
    id: str
    type: Literal["function"]
    function: ReplyFunction


class ReplyMessage(Reply, frozen=True):
    role: Literal["assistant"]
    content: str | None
    refusal: None
    tool_calls: list[ReplyToolCall] | None = None


FinishReason = Literal["stop", "length", "tool_calls"]


class ChatChoice(Reply, frozen=True):
    index: int
    message: ReplyMessage
    logprobs: ChatLogprobs | None
    finish_reason: FinishReason


class ChatCompletion(Reply, frozen=True):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChoice]
    usage: Usage


class DeltaFunction(Reply, frozen=True):
    arguments: str
    name: str | None = None


class DeltaToolCall(Reply, frozen=True):
    index: int
    function: DeltaFunction
    id: str | None = None
    type: Literal["function"] | None = None


class ChatDelta(Reply, frozen=True):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatChunkChoice(Reply, frozen=True):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None
    finish_reason: FinishReason | None


class ChatCompletionChunk(Reply, frozen=True):
    """One server-sent event of a streamed chat (`data: {...}`; the stream ends with `data: [DONE]`)."""
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class CompletionLogprobs(Reply, frozen=True):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(Reply, frozen=True):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: FinishReason | None


class Completion(Reply, frozen=True):
    """A completion, or (streamed) one server-sent event of one (`data: {...}`, then `data: [DONE]`)."""
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class Embedding(Reply, frozen=True):
    object: Literal["embedding"]
    index: int
    embedding: Annotated[list[float] | str, Meta(description="float32 values, or their little-endian bytes in "
                                                               "base64")]


class EmbeddingsUsage(Reply, frozen=True):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsList(Reply, frozen=True):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingsUsage


class Model(Reply, frozen=True):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(Reply, frozen=True):
    object: Literal["list"]
    data: list[Model]


class Health(Reply, frozen=True):
    status: Literal["ok"]
    queue_depth: int
    busy: bool
