"""OpenAI's error shape and response bodies, as the official client expects them (their schema:
serve/schema.py; requests are decoded by serve/requests.py). Plain data: no HTTP, no model."""
from __future__ import annotations

import time
import uuid
from typing import Any, Mapping


class ApiError(Exception):
    """An OpenAI-shaped error: status, message, the parameter at fault, a code."""

    TYPES = {401: "invalid_request_error", 404: "invalid_request_error", 429: "requests",
             500: "server_error", 503: "server_error"}

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


# -- responses --------------------------------------------------------------------------------------
def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """OpenAI's usage; the prompt tokens whose KV entries were reused count as cached_tokens."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def model_card(model_id: str, created: int) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "qnnrt"}


def chat_logprob_entry(token_text: str, logprob: float, top: list[tuple[str, float]]) -> dict[str, Any]:
    return {"token": token_text, "logprob": logprob, "bytes": list(token_text.encode("utf-8")),
            "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode("utf-8"))} for t, lp in top]}


# -- embeddings -------------------------------------------------------------------------------------
def embeddings_body(model_id: str, vectors: list[Any], prompt_tokens: int, base64: bool) -> dict[str, Any]:
    """float: the float32 values as JSON numbers (exact); base64: their little-endian bytes."""
    import base64 as b64

    import numpy as np
    data = []
    for i, v in enumerate(vectors):
        a = np.asarray(v, dtype="<f4")
        data.append({"object": "embedding", "index": i,
                     "embedding": b64.b64encode(a.tobytes()).decode("ascii") if base64 else a.tolist()})
    return {"object": "list", "data": data, "model": model_id,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}
