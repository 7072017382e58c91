"""`--parts auto` sizes parts by qnnrt's own PD prediction of each compiled binary (convert/sizing.py):
a tiny model given a part budget below its one-part need is cut into several parts, each predicted
under the budget (the record, the CLI's line and `qnnrt inspect --pd` agree), and still gives the
reference's tokens; a budget no single layer fits, or past one PD, is a one-line error. The planning
rules themselves (Llama-3.2-1B's shape) run without QNN."""
from __future__ import annotations

import json

import pytest

from qnnrt.convert import ConvertOptions
from qnnrt.convert.sizing import (ONNX_LIMIT, PD_LIMIT, Sizing, at_least_one_layer, onnx_bytes, plan_parts, replan,
                                  weight_need)
from qnnrt.convert.spec import ConvertError, ModelSpec
from qnnrt.soc import SIMULATOR_PD_CAPACITY
from tests.convert.conftest import safe_prefix
from tests.helpers.cli_helpers import qnnrt

CONVERT = ("--context", "128", "--prompt-ar", "16")


def _llama32(vocab: int = 128256) -> ModelSpec:
    return ModelSpec("LlamaForCausalLM", vocab, 2048, 16, 32, 8, 64, 8192, 1e-5, 500000.0, 131072, True)


def test_the_pd_limit_is_the_simulators_one_pd() -> None:
    from qnnrt.runtime.residency.budget import SIMULATOR_CAPACITY
    assert PD_LIMIT == SIMULATOR_PD_CAPACITY == SIMULATOR_CAPACITY


def test_plans_for_a_llama32_1b_shape() -> None:
    small = _llama32(16384)
    one = weight_need(small, 1, 512, 2, 1)
    plan = plan_parts(small, "auto", 512, False, Sizing(one + 1))
    assert plan.parts == 16 and plan.bounds[0] == (0, 1)
    wide = plan_parts(small, "auto", 512, False, Sizing(1 << 30))
    assert 4 <= wide.parts < 16 and all(onnx_bytes(small, b - a, 1, False) <= ONNX_LIMIT for a, b in wide.bounds)
    # a compiled part measured at twice its formula: more parts, the formula scaled
    a, b = wide.bounds[1]
    again, scaled = replan(small, wide, 2, 2 * weight_need(small, b - a, 512, 2, 0), False, Sizing(1 << 30))
    assert again.parts > wide.parts and scaled.scale == pytest.approx(2.0, rel=0.01)
    # the real vocab: the embedding alone is ~2 GiB of float32 in the two graphs of part 1, which a
    # quantized part holds in its ONNX model; a float part's weights are in an external file
    with pytest.raises(ConvertError, match=r"vocab 128256 x hidden 2048.*protobuf's 2 GiB.*a vocab of at most \d+"):
        plan_parts(_llama32(), "auto", 512, False, Sizing(1 << 30, inline=True))
    with pytest.raises(ConvertError, match="protobuf's 2 GiB"):
        plan_parts(_llama32(), 16, 512, False, Sizing(1 << 30, inline=True))
    assert plan_parts(_llama32(), 16, 512, False, Sizing(1 << 30)).parts == 16
    # the default budget (1 GiB) is raised to what the embedding's part needs with one layer (~1.2 GiB);
    # a budget the user gave is kept, and refused when no part fits
    sizing = at_least_one_layer(_llama32(), 512, False, Sizing(1 << 30))
    assert (1 << 30) < sizing.budget < 1.3 * (1 << 30)
    assert 4 <= plan_parts(_llama32(), "auto", 512, False, sizing).parts <= 16
    assert at_least_one_layer(_llama32(), 512, False, Sizing(1 << 30, strict=True)).budget == 1 << 30
    with pytest.raises(ConvertError, match="over the part budget 1.00 GiB: a part holds at least one layer"):
        plan_parts(_llama32(), "auto", 512, False, Sizing(1 << 30, strict=True))
    # the embedding's compiled one-layer part measured 2% over the formula (as the real run did): the
    # default budget rises to it and the plan is kept (its parts come from the cache); a given one fails
    plan = plan_parts(_llama32(), "auto", 512, False, sizing)
    a, b = plan.bounds[0]
    need = int(1.02 * weight_need(_llama32(), b - a, 512, 2, 1))
    again, raised = replan(_llama32(), plan, 1, need, False, sizing)
    assert again.bounds == plan.bounds and raised.budget >= need
    with pytest.raises(ConvertError, match="part 1 of 16 .* over the part budget"):
        one_each = plan_parts(_llama32(), 16, 512, False, Sizing(sizing.budget, strict=True))
        replan(_llama32(), one_each, 1, need, False, Sizing(sizing.budget, strict=True))


@pytest.mark.parametrize("kwargs, message", [
    ({"part_budget": SIMULATOR_PD_CAPACITY + 1}, "past one PD"),
    ({"part_budget": 0}, "give a positive size"),
    ({"part_budget": True}, "give a positive size"),
    ({"part_budget": 1 << 28, "parts": 2}, "--part-budget sizes --parts auto"),
])
def test_bad_part_budgets_are_refused(kwargs, message) -> None:
    with pytest.raises(ConvertError, match=message):
        ConvertOptions(**kwargs)


def test_a_tiny_budget_cuts_a_tiny_model_by_its_predicted_needs(models, references, tmp_path) -> None:
    whole = tmp_path / "whole"
    r = qnnrt("convert", models["llama"], "-o", whole, *CONVERT)
    assert r.returncode == 0, r.stderr[-3000:]
    one = json.loads((whole / "qnnrt_convert.json").read_text())["pd"]
    assert one["auto"] and len(one["predicted_bytes"]) == 1 and one["replans"] == []
    budget = one["predicted_bytes"][0] - 1        # below what the model needs in one part
    out = tmp_path / "cut"
    r = qnnrt("convert", models["llama"], "-o", out, *CONVERT, "--part-budget", str(budget))
    assert r.returncode == 0, r.stderr[-3000:]
    pd = json.loads((out / "qnnrt_convert.json").read_text())["pd"]
    needs = pd["predicted_bytes"]
    assert len(needs) > 1 and max(needs) <= budget and pd["part_budget_bytes"] == budget
    assert pd["replans"] and pd["replans"][0]["need_bytes"] > budget
    assert pd["total_predicted_bytes"] == sum(needs) and pd["pd_limit_bytes"] == SIMULATOR_PD_CAPACITY
    assert "over the part budget" in r.stderr and "predicted PD needs" in r.stdout
    assert sorted(p.name for p in out.glob("*.bin")) == [f"llama_part_{i}_of_{len(needs)}.bin"
                                                          for i in range(1, len(needs) + 1)]
    r = qnnrt("inspect", out, "--pd", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert [c["predicted_bytes"] for c in json.loads(r.stdout)["contexts"]] == needs
    ref = max(references["models"]["llama"], key=safe_prefix)
    r = qnnrt("llm", out, "--prompt-tokens", ",".join(map(str, ref["prompt_ids"])),
              "--max-new-tokens", str(len(ref["tokens"])))
    assert r.returncode == 0, r.stderr[-3000:]
    got = next(x for x in r.stdout.splitlines() if x.strip().startswith("generated:")).split(":", 1)[1].split()
    n = safe_prefix(ref)
    assert [int(t) for t in got][:n] == ref["tokens"][:n]


def test_a_budget_no_layer_fits_is_one_clear_line(models, tmp_path) -> None:
    r = qnnrt("convert", models["llama"], "-o", tmp_path / "b", *CONVERT, "--part-budget", "1MiB")
    assert r.returncode == 1, r.stdout + r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "over the part budget 1.00 MiB" in last and "--part-budget" in last and "Traceback" not in r.stderr
    assert not list(tmp_path.iterdir())
    r = qnnrt("convert", models["llama"], "-o", tmp_path / "b", *CONVERT, "--part-budget", "lots")
    assert r.returncode != 0 and "--part-budget 'lots' is not a size" in r.stderr


def test_a_weight_shared_part_counts_its_shared_weights_once(models, tmp_path) -> None:
    """The x86 simulator cannot load such a binary, but it compiles and its need is read."""
    out = tmp_path / "ws"
    r = qnnrt("convert", models["llama"], "-o", out, *CONVERT, "--weight-sharing", "on", "--parts", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    need = json.loads((out / "qnnrt_convert.json").read_text())["pd"]["predicted_bytes"][0]
    r = qnnrt("inspect", out, "--pd", "--json")
    ctx = json.loads(r.stdout)["contexts"][0]
    shared = {int(n.split(": ", 1)[1].split(" B ")[0]) for g in ctx["graphs"] for n in g["notes"] if "shared" in n}
    assert len(shared) == 1 and need == ctx["predicted_bytes"] + shared.pop()


def test_explicit_parts_past_one_pd_are_a_warning(models, tmp_path, monkeypatch, capsys) -> None:
    from qnnrt.convert import convert, pipeline
    monkeypatch.setattr(pipeline, "PD_LIMIT", 1 << 20)
    rep = convert(models["llama"], tmp_path / "b", ConvertOptions(context=128, prompt_ar=16, parts=1))
    assert "warning: part 1/1 is predicted to need" in capsys.readouterr().err
    assert rep.record["pd"]["auto"] is False and rep.pd_needs == tuple(rep.record["pd"]["predicted_bytes"])
