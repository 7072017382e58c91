"""`qnnrt serve --trace`: each request a slice on the engine thread with its generation inside (graph
calls, sampling, the grammar mask of a structured request), written when the server stops."""
from __future__ import annotations

import json
import signal

import pytest

from tests.helpers.llm_text import tools_text_folder  # noqa: F401
from tests.helpers.trace_check import check_trace, parent_of
from tests.serve.conftest import API_KEY, MODEL_ID, start_server
from tests.serve.test_serve import client

openai = pytest.importorskip("openai", reason="needs the openai client (pip install -e '.[test]')")
pytest.importorskip("llguidance", reason="structured output needs llguidance (pip install -e '.[serve]')")

pytestmark = pytest.mark.slow


def test_a_served_request_is_a_slice_with_its_generation_inside(tools_text_folder, tmp_path):  # noqa: F811
    trace = tmp_path / "trace.json"
    s = start_server(tools_text_folder, tmp_path / "report.json", "--api-key", API_KEY, "--trace", str(trace))
    try:
        c = client(s)
        c.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=6, temperature=0)
        c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=24,
                                  temperature=0, response_format={"type": "json_object"})
    finally:
        assert s.stop(signal.SIGTERM) == 128 + signal.SIGTERM
    assert f"trace: {trace}" in "".join(s.out)
    t = check_trace(trace)
    report = json.loads((tmp_path / "report.json").read_text())
    me = t.pid_of("main process")
    requests = sorted(t.of("serve", me), key=lambda r: r["ts"])
    assert [r["args"]["endpoint"] for r in requests] == [x["endpoint"] for x in report["requests"]]
    assert [r["name"] for r in requests] == [f"request {x['id']}" for x in report["requests"]]
    gens = [g for g in t.of("llm", me) if g["name"] == "generate"]
    assert len(gens) == 2 and all(parent_of(t, g) in requests for g in gens)
    assert [g["args"]["generated"] for g in sorted(gens, key=lambda g: g["ts"])] == \
        [x["n_generated"] for x in report["requests"]]
    forwards = [f for f in t.of("llm", me) if f["name"] in ("decode", "verify")]
    assert len(forwards) == report["totals"]["decode_forwards"]
    masks = [m for m in t.of("llm", me) if m["name"] == "grammar mask"]
    assert masks and all(requests[1]["ts"] <= m["ts"] <= requests[1]["ts"] + requests[1]["dur"] for m in masks)
    assert not any(requests[0]["ts"] <= m["ts"] <= requests[0]["ts"] + requests[0]["dur"] for m in masks)
    graphs = t.of("graph", me)
    assert graphs and all(any(r["ts"] <= g["ts"] <= r["ts"] + r["dur"] for r in requests) for g in graphs)
    assert {g["tid"] for g in gens} == {r["tid"] for r in requests} != {me}   # the engine thread
