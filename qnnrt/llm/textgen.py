"""Generation with text out: ids from the model become text chunks as they come (whole characters,
stop strings cut), the one loop `qnnrt llm --chat` and `qnnrt serve` share."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from qnnrt.llm.detokenize import IncrementalDetokenizer, StopMatcher
from qnnrt.llm.loops import GenerationResult
from qnnrt.llm.session import CachedGenerator
from qnnrt.llm.text import TextModel

# on_text(chunk, token): chunk may be "" (held back or cut); token is None for text released at the end
OnText = Callable[[str, "int | None"], None]


@dataclass
class TextGeneration:
    result: GenerationResult
    reused: int                        # prompt tokens whose KV entries came from the previous call
    text: str                          # what on_text received, joined
    finish_reason: str                 # "stop" (EOS / stop string) | "length" | "cancelled"


def generate_text(gen: CachedGenerator, text: TextModel, prompt: Sequence[int], max_new_tokens: int, *,
                  sampler: Callable[[np.ndarray], int] | None = None, stops: Sequence[str] = (),
                  on_text: OnText | None = None, cancelled: Callable[[], bool] = lambda: False,
                  reuse: bool = True) -> TextGeneration:
    detok = IncrementalDetokenizer(text.tokenizer.decode, context=prompt)
    stop = StopMatcher(stops)
    stop_ids = set(text.stop_ids)
    parts: list[str] = []

    def out(chunk: str, token: int | None) -> None:
        parts.append(chunk)
        if on_text is not None:
            on_text(chunk, token)

    def on_token(tok: int) -> bool:
        out("" if tok in stop_ids else stop.feed(detok.add(tok)), tok)
        return stop.stopped or cancelled()

    res, reused = gen.generate(prompt, max_new_tokens, sampler=sampler, eos_ids=sorted(stop_ids),
                               on_token=on_token, reuse=reuse)
    if res.stop_reason == "stopped" and not stop.stopped:
        return TextGeneration(res, reused, "".join(parts), "cancelled")
    tail = stop.feed(detok.flush()) + stop.flush()
    if tail:
        out(tail, None)
    finish = "length" if res.stop_reason in ("max_new_tokens", "context") else "stop"
    return TextGeneration(res, reused, "".join(parts), finish)
