"""Shared fixtures: real context binaries and programs built at test time (cached per session)."""
from tests.helpers.program_fixtures import (chain12, chain_pd, distinct_binaries,  # noqa: F401
                                    two_method_program)
from tests.helpers.qnn_fixtures import q8_binary, small_binary, two_graph_binary  # noqa: F401

try:
    from tests.helpers.build_fixtures import *  # noqa: F401,F403  (demo programs, from the builder)
except ImportError:
    pass


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _private_pd_budget_cache(tmp_path, monkeypatch):
    """Each test has its own user cache: a PD budget learned by one test never plans another."""
    monkeypatch.setenv("QNNRT_CACHE_DIR", str(tmp_path / "qnnrt-cache"))
