"""The model's chat template rendered as Hugging Face `transformers` renders it: Jinja2 (>= 3.1.6,
earlier ones have sandbox escapes) in an immutable sandbox, blocks trimmed, loop controls, the
`{% generation %}` block (rendered as is), the `tojson` filter with unescaped Unicode, and the
`raise_exception`, `strftime_now`, `dict` and `namespace` globals; the special tokens passed as
variables."""
from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any, Mapping, Sequence

from qnnrt.llm.errors import ChatTemplateError
from qnnrt.llm.text import INSTALL_HINT


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the messages: {message}")


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


@lru_cache(maxsize=8)
def _compile(source: str) -> Any:
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ChatTemplateError(f"chat templates need the `jinja2` package: {INSTALL_HINT}") from None
    if tuple(int(x) for x in jinja2.__version__.split(".")[:3] if x.isdigit()) < (3, 1, 6):
        raise ChatTemplateError(f"jinja2 {jinja2.__version__} has known sandbox escapes: pip install 'jinja2>=3.1.6'")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=_extensions())
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _make_dict
    env.globals["namespace"] = _namespace_type()
    try:
        return env.from_string(source)
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"the chat template does not compile: {e}") from None


def render_chat(template: str | None, messages: Sequence[Mapping[str, Any]], *,
                special_tokens: Mapping[str, str], add_generation_prompt: bool = True,
                tools: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The prompt text for ``messages`` (dicts with role and content, perhaps tool_calls) and the
    ``tools`` (function schemas, as transformers passes them)."""
    if not template:
        raise ChatTemplateError("the tokenizer has no chat template (no chat_template.jinja, none in "
                                "tokenizer_config.json): give the prompt text yourself (qnnrt llm --prompt TEXT, "
                                "or /v1/completions)")
    compiled = _compile(template)
    import jinja2
    try:
        return str(compiled.render(messages=[dict(m) for m in messages], add_generation_prompt=add_generation_prompt,
                                   tools=[dict(t) for t in tools] if tools else None, documents=None,
                                   **special_tokens))
    except ChatTemplateError:
        raise
    except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        raise ChatTemplateError(f"the chat template failed on these messages: {e}") from None
