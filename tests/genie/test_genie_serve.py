"""`qnnrt serve BUNDLE --tokenizer BUNDLE`: the official openai client gets the float reference's
text (greedy), streamed and not, and the next request sharing the prompt reuses its KV entries."""
from __future__ import annotations

import pytest

from tests.helpers.data import GENIE_F32
from tests.serve.conftest import API_KEY, start_server

openai = pytest.importorskip("openai", reason="the client test needs openai (pip install -e '.[test]')")


@pytest.fixture(scope="module")
def genie_server(tmp_path_factory):
    report = tmp_path_factory.mktemp("genie_serve") / "report.json"
    s = start_server(GENIE_F32, report, "--api-key", API_KEY, model=GENIE_F32, model_id="tiny")
    yield s
    s.stop()


def test_the_openai_client_gets_the_reference_text(genie_server, references):
    client = openai.OpenAI(base_url=genie_server.base + "/v1", api_key=API_KEY)
    ref = references[0]
    n = len(ref["tokens"])
    r = client.completions.create(model="tiny", prompt=ref["prompt"], max_tokens=n)   # the config: top-k 1
    assert r.choices[0].text == ref["text"] and r.usage.completion_tokens == n
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="tiny", prompt=ref["prompt"], max_tokens=n, temperature=0, stream=True))
    assert streamed == ref["text"]
    again = client.completions.create(model="tiny", prompt=ref["prompt"], max_tokens=n, temperature=0)
    assert again.choices[0].text == ref["text"]
    assert again.usage.prompt_tokens_details.cached_tokens == len(ref["prompt_ids"]) - 1
