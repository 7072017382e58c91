"""The CPU work a request needs before the engine runs it: decoding its body, rendering the chat
template, tokenizing, compiling a grammar. None of it runs on the event loop (a 4 MiB prompt took
8 s there and stalled /health, issue 47): `Preparer` runs it on at most WORKERS threads with at most
`waiting` requests queued for them (more: 429). A prompt whose first characters already make more
tokens than fit is refused without tokenizing the rest; after a large body the allocator gives the
freed memory back (malloc_trim), so RSS returns. No HTTP."""
from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, TypeVar

from qnnrt.llm.chat_template import render_chat
from qnnrt.llm.errors import ChatTemplateError, GrammarError, TokenizerError
from qnnrt.llm.grammar import Grammar, GrammarCompiler
from qnnrt.llm.layout import LlmLayout
from qnnrt.llm.text import TextModel
from qnnrt.serve import schema as s
from qnnrt.serve.openai_api import ApiError
from qnnrt.serve.tools import ToolRequest, forced_call_lark, messages_for_plain_template, template_renders_tools

T = TypeVar("T")
WORKERS = 2                    # threads preparing requests (the engine has its own)
CHARS_PER_TOKEN_PROBE = 16     # a prompt longer than capacity x this is first counted on that prefix
TRIM_AFTER_BYTES = 1 << 20     # after a body this large, give freed heap back to the OS


class Preparer:
    """A bounded pool for the requests' CPU work, off the event loop."""

    def __init__(self, waiting: int):
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="qnnrt-serve-prepare")
        self._limit = waiting + WORKERS
        self._in = 0

    async def run(self, fn: Callable[..., T], *args: Any, size: int = 0) -> T:
        """``fn(*args)`` on the pool; a 429 when too many wait for it. ``size``: the body's bytes
        (a large one trims the heap afterwards)."""
        if self._in >= self._limit:
            raise ApiError(429, f"the server is busy: {self._in} requests are being prepared; retry later",
                           code="rate_limit_exceeded", headers={"Retry-After": "1"})
        self._in += 1
        try:
            return await asyncio.wrap_future(self._pool.submit(_then_trim, fn, args, size))
        finally:
            self._in -= 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _then_trim(fn: Callable[..., T], args: tuple[Any, ...], size: int) -> T:
    try:
        return fn(*args)
    finally:
        if size >= TRIM_AFTER_BYTES:
            del args
            gc.collect()          # a refused request's objects may sit in cycles (tracebacks, templates)
            trim_heap()


_TRIM_LOCK = threading.Lock()


def trim_heap() -> None:
    """glibc keeps freed heap (per thread arena) for reuse; give it back to the OS. A no-op
    elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return                                   # musl and others: no malloc_trim
    with _TRIM_LOCK:
        trim(0)


class Prompts:
    """Prompt ids and grammars for the model: the template rendered, the text tokenized, the fit
    checked, grammars compiled (each a 400 naming the field or the template when it fails)."""

    def __init__(self, text: TextModel, layout: LlmLayout, grammars: GrammarCompiler | None):
        self.text, self.layout, self.grammars = text, layout, grammars

    def render(self, messages: list[dict[str, Any]], tools: ToolRequest | None, param: str = "messages") -> str:
        """The prompt: the template renders the offered tools itself when it can, else they go into
        the system message (and earlier calls into the assistant's text)."""
        tok = self.text.tokenizer
        offered = tools.offered if tools is not None else ()
        native = template_renders_tools(tok.chat_template)
        if not native:
            messages = messages_for_plain_template(messages, offered)
        try:
            return render_chat(tok.chat_template, messages, special_tokens=tok.special_tokens,
                               tools=[t.as_template_tool() for t in offered] if native and offered else None,
                               name=tok.template_source)
        except ChatTemplateError as e:
            raise ApiError(400, str(e), param=param, code="chat_template_error") from None

    def encode(self, text: str, param: str) -> list[int]:
        """The prompt's ids; a text whose prefix alone is more tokens than fit is refused before the
        rest is tokenized."""
        cap = self.layout.prompt_capacity
        probe = max(4096, cap * CHARS_PER_TOKEN_PROBE)
        try:
            if len(text) > probe:
                head = len(self.text.prompt_ids(text[:probe]))
                if head > cap + 1:           # +1: the last token of a cut prefix may be split in two
                    raise ApiError(400, f"the prompt has more than {cap} tokens (its first {probe} characters are "
                                        f"{head}); at most {cap} fit this model (context {self.layout.context_len} "
                                        f"tokens)", param=param, code="context_length_exceeded")
            ids = self.text.prompt_ids(text)
        except TokenizerError as e:
            raise ApiError(400, str(e), param=param, code="invalid_value") from None
        self.check_fits(ids, param)
        return ids

    def check_fits(self, ids: list[int], param: str) -> None:
        cap = self.layout.prompt_capacity
        if len(ids) > cap:
            raise ApiError(400, f"the prompt has {len(ids)} tokens; at most {cap} fit this model (context "
                                f"{self.layout.context_len} tokens, prefill window {self.layout.prefill.ar_len})",
                           param=param, code="context_length_exceeded")

    def compile(self, what: str, make: Callable[[GrammarCompiler], Grammar]) -> Grammar:
        if self.grammars is None:
            raise ApiError(400, f"{what}: constrained decoding needs an end-of-sequence id, and this model "
                                f"and tokenizer have none", param=what, code="unsupported_parameter")
        try:
            return make(self.grammars)
        except GrammarError as e:
            raise ApiError(400, f"{what}: the grammar library cannot compile it: {e}", param=what,
                           code="invalid_schema") from None

    def format_grammar(self, rf: s.ResponseFormat | None, param: str = "response_format") -> Grammar | None:
        if isinstance(rf, s.JsonObjectFormat):
            return self.compile(param, lambda g: g.json_schema({"type": "object"}))
        if isinstance(rf, s.JsonSchemaFormat):
            schema = rf.json_schema.schema if rf.json_schema.schema is not None else {"type": "object"}
            return self.compile(f"{param}.json_schema.schema", lambda g: g.json_schema(schema))
        return None

    def tool_grammar(self, tools: ToolRequest, param: str = "tools") -> Grammar:
        """The grammar of a forced or required call; each tool's parameters are checked on their
        own first, so a bad one is named."""
        for i, t in enumerate(tools.tools):
            if t in tools.offered:
                check = partial(GrammarCompiler.json_schema, schema=t.parameters)
                self.compile(f"{param}[{i}].function.parameters", check)
        return self.compile(param, lambda g: g.lark(forced_call_lark(tools)))

    def grammar(self, tools: ToolRequest | None, rf: s.ResponseFormat | None) -> Grammar | None:
        """What a chat's tokens are masked to: a forced call's grammar, else the response format's."""
        if tools is not None and tools.constrained:
            return self.tool_grammar(tools)
        return self.format_grammar(rf)
