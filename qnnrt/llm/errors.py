"""Errors of the LLM runner (ValueError subclasses, so the CLI reports them as user errors)."""
from __future__ import annotations

from qnnrt.errors import QnnrtError


class LayoutError(QnnrtError, ValueError):
    """The program is not an ExecuTorch Qualcomm LLM program of a supported layout."""


class ContextLengthError(QnnrtError, ValueError):
    """The request does not fit the compiled context length."""


class TokenizerError(QnnrtError, ValueError):
    """The tokenizer folder or file is missing, unreadable or not this model's."""


class ChatTemplateError(QnnrtError, ValueError):
    """The chat template is missing, broken, or refused the messages (its raise_exception)."""


class GrammarError(QnnrtError, ValueError):
    """A grammar (a JSON schema, a tool's parameters) the grammar library cannot compile, or that
    left no token to choose."""
