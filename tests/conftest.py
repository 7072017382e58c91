"""Shared fixtures: real context binaries and programs built at test time (cached per session)."""
from tests.helpers.program_fixtures import (chain12, chain_pd, distinct_binaries,  # noqa: F401
                                    two_method_program)
from tests.helpers.qnn_fixtures import q8_binary, small_binary, two_graph_binary  # noqa: F401
from tests.helpers.fault_shim import fault_shim  # noqa: F401

try:
    from tests.helpers.build_fixtures import *  # noqa: F401,F403  (demo programs, from the builder)
except ImportError:
    pass


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _private_pd_budget_cache(tmp_path, monkeypatch):
    """Each test has its own PD budget file: a budget learned by one test never plans another (the
    compile and vetting caches stay shared: they only save time)."""
    monkeypatch.setenv("QNNRT_PD_BUDGET_FILE", str(tmp_path / "pd_budget.json"))
