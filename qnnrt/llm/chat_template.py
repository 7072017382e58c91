"""The model's chat template rendered as Hugging Face `transformers` renders it: Jinja2 (>= 3.1.6,
earlier ones have sandbox escapes) in an immutable sandbox, blocks trimmed, loop controls, the
`{% generation %}` block (rendered as is), the `tojson` filter with unescaped Unicode, and the
`raise_exception`, `strftime_now`, `dict` and `namespace` globals; the special tokens passed as
variables.

A template comes with the model's files, so it is treated as hostile: rendering has a time budget
(`budget_s`: past it the rendering thread gets an exception at its next bytecode, whatever loop it is
in), `*`, `%` and `**` may not build strings, lists or numbers past MAX_RENDER_CHARS / MAX_POWER_BITS, the
output is capped at MAX_RENDER_CHARS, and any failure (OverflowError, RecursionError, MemoryError,
...) is a ChatTemplateError naming the template."""
from __future__ import annotations

import ctypes
import json
import math
import re
import threading
from datetime import datetime
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

from qnnrt.llm.errors import ChatTemplateError
from qnnrt.llm.text import INSTALL_HINT


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"refused the messages: {message}")


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _make_dict(*args: Any, **kwargs: Any) -> dict:
    return dict(*args, **kwargs)


def _extensions() -> list[Any]:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols

    class GenerationBlock(Extension):
        """`{% generation %}...{% endgeneration %}` (transformers marks assistant text with it): the
        body, unchanged."""
        tags = {"generation"}

        def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body).set_lineno(lineno)

    return [GenerationBlock, loopcontrols]


def _namespace_type() -> Any:
    import jinja2.utils
    from jinja2.exceptions import SecurityError

    class SafeNamespace(jinja2.utils.Namespace):
        """Jinja's namespace without underscore attributes (no reach into Python internals)."""

        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for key in attrs:
                SafeNamespace.check(key)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, key: str, value: Any) -> None:
            SafeNamespace.check(key)
            jinja2.utils.Namespace.__setitem__(self, key, value)

        @staticmethod
        def check(key: Any) -> None:
            if isinstance(key, str) and key.startswith("_"):
                raise SecurityError(f"a chat template may not set {key!r} on a namespace")

    return SafeNamespace


RENDER_BUDGET_S = 2.0          # a chat template renders a prompt in milliseconds
MAX_RENDER_CHARS = 64 << 20    # the longest prompt text (and string or list a template may build)
MAX_POWER_BITS = 4096          # the largest integer `**` may make


class _OverBudget(Exception):
    """Raised in the rendering thread when its time is up."""


def _binop(op: str, left: Any, right: Any) -> Any:
    """`*`, `%` and `**` of the sandbox, refusing results past the caps (before they are built)."""
    from jinja2.exceptions import SecurityError
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_RENDER_CHARS:
                raise SecurityError(f"a sequence of {len(seq) * n} items is past the limit of {MAX_RENDER_CHARS}")
        return left * right
    if op == "%":
        if isinstance(left, str) and any(len(w) > 6 for w in re.findall(r"%[^a-zA-Z%]*?(\d+)", left)):
            raise SecurityError("a %-format of a width past 999999")
        return left % right
    if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0 \
            and right * math.log2(abs(left)) > MAX_POWER_BITS:
        raise SecurityError(f"{left} ** {right} is past the limit of {MAX_POWER_BITS} bits")
    return left**right


@lru_cache(maxsize=8)
def _compile(source: str) -> Any:
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ChatTemplateError(f"chat templates need the `jinja2` package: {INSTALL_HINT}") from None
    if tuple(int(x) for x in jinja2.__version__.split(".")[:3] if x.isdigit()) < (3, 1, 6):
        raise ChatTemplateError(f"jinja2 {jinja2.__version__} has known sandbox escapes: pip install 'jinja2>=3.1.6'")

    class Env(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "%"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            return _binop(operator, left, right)

    env = Env(trim_blocks=True, lstrip_blocks=True, extensions=_extensions())
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _make_dict
    env.globals["namespace"] = _namespace_type()
    try:
        return env.from_string(source)
    except (jinja2.TemplateError, RecursionError, MemoryError, ValueError, OverflowError) as e:
        raise ChatTemplateError(f"does not compile: {type(e).__name__}: {e}") from None


def _within(budget_s: float, work: Callable[[], str]) -> str:
    """``work()`` in this thread, stopped by _OverBudget once ``budget_s`` is up (an asynchronous
    exception: it interrupts any Python loop; `done` under the lock keeps it from landing later)."""
    lock, done = threading.Lock(), [False]
    tid = threading.get_ident()

    def expire() -> None:
        with lock:
            if not done[0]:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(_OverBudget))

    timer = threading.Timer(budget_s, expire)
    timer.daemon = True
    timer.start()
    try:
        out = work()
        with lock:
            done[0] = True
        return out
    finally:
        timer.cancel()
        with lock:
            done[0] = True


def _render_capped(compiled: Any, variables: dict[str, Any]) -> str:
    parts, size = [], 0
    for part in compiled.generate(**variables):
        size += len(part)
        if size > MAX_RENDER_CHARS:
            raise ChatTemplateError(f"renders past {MAX_RENDER_CHARS} characters")
        parts.append(part)
    return "".join(parts)


def render_chat(template: str | None, messages: Sequence[Mapping[str, Any]], *,
                special_tokens: Mapping[str, str], add_generation_prompt: bool = True,
                tools: Sequence[Mapping[str, Any]] | None = None, name: str = "the chat template",
                budget_s: float = RENDER_BUDGET_S) -> str:
    """The prompt text for ``messages`` (dicts with role and content, perhaps tool_calls) and the
    ``tools`` (function schemas, as transformers passes them). ``name`` (where the template comes
    from) is in every error; rendering stops after ``budget_s`` seconds."""
    if not template:
        raise ChatTemplateError("the tokenizer has no chat template (no chat_template.jinja, none in "
                                "tokenizer_config.json): give the prompt text yourself (qnnrt llm --prompt TEXT, "
                                "or /v1/completions)")
    try:
        compiled = _compile(template)
    except ChatTemplateError as e:
        raise ChatTemplateError(f"{name}: {e}") from None
    variables = dict(messages=[dict(m) for m in messages], add_generation_prompt=add_generation_prompt,
                     tools=[dict(t) for t in tools] if tools else None, documents=None, **special_tokens)
    try:
        return _within(budget_s, lambda: _render_capped(compiled, variables))
    except _OverBudget:
        raise ChatTemplateError(f"{name} did not finish rendering within {budget_s:g} s (a loop that runs too "
                                f"long): fix the template") from None
    except ChatTemplateError as e:
        raise ChatTemplateError(f"{name}: {e}") from None
    except RecursionError:
        raise ChatTemplateError(f"{name} recursed too deep (a macro that calls itself without end)") from None
    except Exception as e:  # noqa: BLE001 - the template is foreign code: any failure is its own
        raise ChatTemplateError(f"{name} failed on these messages: {type(e).__name__}: {e}") from None
