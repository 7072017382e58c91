"""A Genie config's stop conditions and penalties as `qnnrt serve`'s defaults: its stop-sequence cuts a
request that gives no ``stop`` (as Genie's text query does) and its token penalty is what a request
without penalties samples with (its eot-token is a stop id of the layout, as eos-token is)."""
from __future__ import annotations

import pytest

from qnnrt.llm import SamplingOptions
from qnnrt.serve import requests as rq
from qnnrt.serve import schema as s
from tests.genie.conftest import copy_bundle, edit_config
from tests.helpers.data import GENIE_F32
from tests.serve.conftest import API_KEY, start_server

openai = pytest.importorskip("openai", reason="the client test needs openai (pip install -e '.[test]')")

FULL = " green oldanight little ranupon little and old and old"   # the bundle's 12 greedy tokens


def test_the_configs_stop_sequence_cuts_a_request_without_stop(tmp_path):
    """The text before the first stop sequence (cut inside a token, as Genie's query cuts it);
    a request's own ``stop`` (even []) replaces the config's."""
    b = copy_bundle(GENIE_F32, tmp_path / "bundle")
    edit_config(b, lambda d: d["dialog"].__setitem__("stop-sequence", ["nd o"]))
    srv = start_server(b, tmp_path / "report.json", "--api-key", API_KEY, model=b, model_id="tiny")
    try:
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key=API_KEY)
        r = client.completions.create(model="tiny", prompt="the little robot", max_tokens=12)
        assert (r.choices[0].text, r.choices[0].finish_reason) == (" green oldanight little ranupon little a", "stop")
        r = client.completions.create(model="tiny", prompt="the little robot", max_tokens=12, stop=[])
        assert r.choices[0].text == FULL
    finally:
        srv.stop()


def test_a_request_without_penalties_takes_the_configs():
    defaults = SamplingOptions(temperature=0.7, repetition_penalty=1.3, presence_penalty=0.1, penalty_last_n=64)
    req = rq.decode('{"model": "m", "prompt": "hi"}', s.CompletionRequest)
    p = rq.params(req, 512, defaults, (" and",))
    o = p.sampling
    assert (o.repetition_penalty, o.presence_penalty, o.penalty_last_n, p.stops) == (1.3, 0.1, 64, [" and"])
    req = rq.decode('{"model": "m", "prompt": "hi", "repetition_penalty": 1.0, "stop": "x"}', s.CompletionRequest)
    p = rq.params(req, 512, defaults, (" and",))
    assert (p.sampling.repetition_penalty, p.stops) == (1.0, ["x"])
