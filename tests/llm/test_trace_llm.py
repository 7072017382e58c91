"""The trace of an LLM generation with speculation on the real simulator (the ExecuTorch-made fp16
fixture): its phases as nested slices (generate > prefill chunk / decode / verify > run > graph
call, sampling inside), each verification's drafted / accepted counts summing to the report's, and
QNN's per-op events under the graph calls at the detailed profile level."""
from __future__ import annotations

import json

import pytest

from qnnrt import LoadOptions, load
from qnnrt.llm import LlmRunner
from qnnrt.llm.speculative import SpeculativeOptions
from qnnrt.profiling.exec_profile import ExecutionProfiler
from qnnrt.profiling.trace import Tracer
from tests.helpers.data import LLM_STORIES
from tests.helpers.trace_check import check_trace, parent_of

pytestmark = pytest.mark.slow


def test_trace_of_a_speculative_generation(tmp_path):
    prompt = json.loads((LLM_STORIES / "meta.json").read_text())["prompt"][:16] * 2
    tracer = Tracer()
    profiler = ExecutionProfiler("detailed")
    with load(str(LLM_STORIES / "model.pte"),
              options=LoadOptions(trace=tracer, profile_level="detailed", exec_profiler=profiler)) as prog:
        runner = LlmRunner(prog, speculative=SpeculativeOptions(policy="always"))
        res = runner.generate(prompt, 24, eos_ids=[])
        graphs_per = {m: len(prog.method(m).graph_order) for m in ("prefill_forward", "kv_forward")}
    t = check_trace(tracer.write(tmp_path / "llm.json"))
    me = t.pid_of("main process")
    s = res.speculative
    assert s is not None and s["verifications"] > 0 and s["accepted"] > 0

    llm = t.of("llm", me)
    gen = [x for x in llm if x["name"] == "generate"]
    assert len(gen) == 1 and gen[0]["args"]["generated"] == len(res.tokens)
    chunks = [x for x in llm if x["name"] == "prefill chunk"]
    assert len(chunks) == res.prefill_calls and sum(c["args"]["tokens"] for c in chunks) == len(prompt)
    verify = [x for x in llm if x["name"] == "verify"]
    plain = [x for x in llm if x["name"] == "decode"]
    assert len(verify) == s["verifications"] and len(plain) == s["plain_forwards"]
    assert len(verify) + len(plain) == res.decode_forwards
    assert sum(v["args"]["drafted"] for v in verify) == s["drafted"]
    assert sum(v["args"]["accepted"] for v in verify) == s["accepted"]
    assert sum(x["args"]["tokens"] for x in verify + plain) == s["tokens"]
    samples = [x for x in llm if x["name"].startswith("sample")]
    assert len(samples) >= len(res.tokens)
    for x in chunks + verify + plain:
        assert parent_of(t, x) is gen[0]

    graphs = t.of("graph", me)   # the verifier is the prefill method: its graphs per verification
    assert len(graphs) == ((res.prefill_calls + len(verify)) * graphs_per["prefill_forward"]
                           + len(plain) * graphs_per["kv_forward"])
    for g in graphs:
        run = parent_of(t, g)
        assert run is not None and run["cat"] == "run"
        assert parent_of(t, run)["name"] in ("prefill chunk", "verify", "decode")
        assert g["args"]["cycles"] > 0
    ops = t.of("op", me)   # detailed: each graph call's ops under it, their cycles as arguments
    assert ops and all(parent_of(t, o)["cat"] == "graph" and o["args"]["cycles"] > 0 for o in ops)
    assert sum(o["args"]["cycles"] for o in ops) <= profiler.accel_cycles()
    assert sum(g["args"]["cycles"] for g in graphs) == profiler.accel_cycles()   # every call's


def test_llm_cli_trace_with_speculation(tmp_path, monkeypatch):
    from tests.helpers.cli_helpers import qnnrt
    monkeypatch.setenv("QNNRT_PROGRESS_INTERVAL", "0.2")
    prompt = json.loads((LLM_STORIES / "meta.json").read_text())["prompt"][:16] * 2
    trace, rep = tmp_path / "t.json", tmp_path / "r.json"
    r = qnnrt("llm", LLM_STORIES / "model.pte", "--prompt-tokens", ",".join(map(str, prompt)),
              "--max-new-tokens", "20", "--ignore-eos", "--speculative", "prompt-lookup", "--draft-policy",
              "always", "--report", rep, "--trace", trace)
    assert r.returncode == 0, r.stderr
    assert f"trace: {trace} (" in r.stdout
    report = json.loads(rep.read_text())
    t = check_trace(trace)
    verify = [x for x in t.of("llm") if x["name"] == "verify"]
    s = report["speculative"]
    assert len(verify) == s["verifications"] > 0
    assert sum(v["args"]["drafted"] for v in verify) == s["drafted"]
    assert sum(v["args"]["accepted"] for v in verify) == s["accepted"]
    creates = [c for c in t.of("context") if c["name"].startswith("create")]
    assert len(creates) == report["residency"]["creates"]
