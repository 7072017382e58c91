"""`qnnrt inspect` of a program (a folder, an EPContext .onnx): SoC and HTP arch per binary, each
graph's I/O as for one .bin, graphs of one signature folded with their count, all of it in --json."""
from __future__ import annotations

import json

from tests.helpers.cli_helpers import qnnrt


def test_inspect_a_program_folds_its_graphs_and_names_soc_and_io(chain12):
    r = qnnrt("inspect", chain12.model, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert len(d["contexts"]) == 12
    assert all(c["soc"] == "SM8550" and c["htp_arch"] == 73 and c["graph_io"] for c in d["contexts"].values())
    assert d["socs"] == [{"soc_model": 43, "soc": "SM8550", "htp_arch": 73, "contexts": 12,
                          "build_id": d["socs"][0]["build_id"], "first": "contexts/c000.bin",
                          "last": "contexts/c011.bin"}]
    groups = d["graph_groups"]
    assert sum(g["count"] for g in groups) == 12 and len(groups) < 12   # the same [1, 64] graph, folded
    for g in groups:
        assert len(g["members"]) == g["count"]
        for t in g["inputs"] + g["outputs"]:
            assert t["dtype"] and t["shape"] == [1, 64] and "quantization" in t
    text = qnnrt("inspect", chain12.model)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert "SoC SM8550 (model 43), HTP v73" in out and "every binary" in out
    assert f"{groups[0]['count']} x graph like" in out and "and " in out and " more" in out
    assert "input " in out and "output " in out and "1x64" in out
    assert out.count("contexts/c0") < 12    # not a line per context
