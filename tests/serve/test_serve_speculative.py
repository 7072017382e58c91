"""`qnnrt serve --speculative prompt-lookup`: every request decodes with drafts verified by the
prefill graph; the official client sees what plain decoding gives (greedy), usage counts every
token, logprobs follow each token, and the report says what speculation did."""
from __future__ import annotations

import json

import pytest

from qnnrt import load
from qnnrt.llm import LlmRunner
from qnnrt.llm.session import CachedGenerator
from qnnrt.llm.text import TextModel, TextTokenizer
from qnnrt.llm.textgen import generate_text
from tests.serve.conftest import API_KEY, FIX, MODEL_ID, start_server

openai = pytest.importorskip("openai", reason="needs the openai client (pip install -e '.[test]')")
pytestmark = pytest.mark.slow

PROMPT = "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat"
N = 24


@pytest.fixture(scope="module")
def spec_server(text_folder, tmp_path_factory):
    s = start_server(text_folder, tmp_path_factory.mktemp("serve_spec") / "report.json", "--api-key", API_KEY,
                     "--speculative", "prompt-lookup", "--draft-policy", "always")
    yield s
    if s.proc.poll() is None:
        s.stop()


@pytest.fixture(scope="module")
def plain_text(text_folder) -> str:
    """The same completion through plain decoding in this process."""
    tok = TextTokenizer.from_path(text_folder)
    with load(str(FIX / "model.pte")) as prog:
        runner = LlmRunner(prog)
        text = TextModel.of(tok, runner.layout)
        return generate_text(CachedGenerator(runner), text, text.prompt_ids(PROMPT), N).text


def _drafting(server) -> tuple[int, int]:
    """(verifications, draft tokens accepted) so far, from the server's /metrics."""
    import httpx
    text = httpx.get(server.base + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
    values = dict(line.rsplit(" ", 1) for line in text.splitlines())
    return int(values["qnnrt_draft_verifications_total"]), int(values["qnnrt_draft_tokens_accepted_total"])


def test_structured_output_holds_under_speculation(spec_server):
    """Drafts pass the grammar's mask like any token (a draft token it forbids is rejected): every
    json_schema answer, sampled or greedy, validates, and in each request drafts were verified and
    some accepted under the grammar; a greedy json_object answer is an object."""
    import jsonschema

    from tests.serve.test_serve_structured import BUDGET, HI, SCHEMAS
    c = openai.OpenAI(base_url=spec_server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)
    for name, schema in sorted(SCHEMAS.items()):
        for temperature in (1.0, 0.0):
            before = _drafting(spec_server)
            r = c.chat.completions.create(
                model=MODEL_ID, messages=HI, max_tokens=BUDGET, temperature=temperature, seed=11,
                response_format={"type": "json_schema",
                                 "json_schema": {"name": name, "schema": schema, "strict": True}})
            assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
            jsonschema.validate(json.loads(r.choices[0].message.content), schema)
            verified, accepted = (a - b for a, b in zip(_drafting(spec_server), before, strict=True))
            assert verified > 0 and accepted > 0, (name, temperature)
    r = c.chat.completions.create(model=MODEL_ID, messages=HI, max_tokens=BUDGET, temperature=0,
                                  response_format={"type": "json_object"})
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_speculative_server_answers_as_plain_decoding_with_exact_usage(spec_server, plain_text):
    c = openai.OpenAI(base_url=spec_server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)
    whole = c.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=N, temperature=0, logprobs=2)
    assert whole.choices[0].text == plain_text
    assert whole.usage.completion_tokens == len(whole.choices[0].logprobs.tokens)
    lp = whole.choices[0].logprobs
    for tok, top in zip(lp.tokens, lp.top_logprobs):     # each token's own row, not its block's last
        assert top[tok] == max(top.values())             # greedy: the token is its row's best
    chunks = list(c.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=N, temperature=0, stream=True,
                                       stream_options={"include_usage": True}))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == plain_text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert spec_server.stop() == 143                      # SIGTERM: the report is written on the way out
    report = json.loads(spec_server.report.read_text())
    figures = [r["speculative"] for r in report["requests"][-2:]]
    assert all(f["verifications"] > 0 for f in figures)
    assert report["totals"]["decode_forwards"] < report["totals"]["decode_tokens"]
