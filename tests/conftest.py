"""Shared fixtures: real context binaries and programs built at test time (cached per session)."""
import pytest

# the session fixtures: real context binaries and programs (qnn_fixtures, program_fixtures) and demo
# programs made by the builder (build_fixtures)
pytest_plugins = ["tests.helpers.qnn_fixtures", "tests.helpers.program_fixtures",
                  "tests.helpers.build_fixtures"]


@pytest.fixture(autouse=True)
def _private_pd_budget_cache(tmp_path, monkeypatch):
    """Each test has its own PD budget file: a budget learned by one test never plans another (the
    compile and vetting caches stay shared: they only save time)."""
    monkeypatch.setenv("QNNRT_PD_BUDGET_FILE", str(tmp_path / "pd_budget.json"))
