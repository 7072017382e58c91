"""`qnnrt inspect PATH --pd`: the predicted PD need of every context, and how the program fits."""
from __future__ import annotations

import json

import pytest

from tests.helpers.cli_helpers import qnnrt


def test_inspect_pd_json_and_budget(chain12):
    r = qnnrt("inspect", str(chain12.model), "--pd", "--json", "--budget", "35MB")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [c["key"] for c in d["contexts"]] == [f"contexts/c{i:03d}.bin" for i in range(12)]
    for c in d["contexts"]:
        assert c["predicted_bytes"] == sum(c["parts"].values()) > 10 << 20
    assert d["total_bytes"] == sum(c["predicted_bytes"] for c in d["contexts"])
    assert d["budget_bytes"] == 35 << 20 and d["budget_source"] == "override"
    assert d["eager_fits"] is False
    m = d["methods"]["chain"]
    assert m["min_creations_per_iteration"] > 0 and m["peaks"]["auto"] <= 35 << 20


@pytest.mark.slow
def test_inspect_pd_table_on_the_simulator(chain12):
    r = qnnrt("inspect", str(chain12.model), "--pd")
    assert r.returncode == 0, r.stderr
    assert "eager fits" in r.stdout and "simulator" in r.stdout and "VTCM" in r.stdout
    assert "fewest context creations per iteration within the budget: 0 (eager)" in r.stdout
