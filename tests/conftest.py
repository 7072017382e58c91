"""Shared fixtures: real context binaries and programs built at test time (cached per session).

The suite keeps out of the user's home: every cache qnnrt (and matplotlib) writes goes to a folder of
the repository's (`.test-cache/`, git-ignored; `QNNRT_TEST_CACHE_DIR` moves it), set here before any
test or child process runs, and the session fails if `~/.cache/qnnrt` changed during it."""
import os

import pytest

from tests.helpers.data import TEST_CACHE
from tests.helpers.home_guard import HomeSnapshot

for _var, _sub in (("QNNRT_CACHE_DIR", "qnnrt"), ("XDG_CACHE_HOME", "xdg"), ("MPLCONFIGDIR", "matplotlib")):
    os.environ[_var] = str(TEST_CACHE / _sub)   # inherited by every child process the tests start
_HOME_BEFORE = HomeSnapshot.take()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    changed = HomeSnapshot.take().changes_since(_HOME_BEFORE)
    if changed:
        print(f"\nthe test session wrote into the user's home: {', '.join(changed[:10])}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

# the session fixtures: real context binaries and programs (qnn_fixtures, program_fixtures) and demo
# programs made by the builder (build_fixtures)
pytest_plugins = ["tests.helpers.qnn_fixtures", "tests.helpers.program_fixtures",
                  "tests.helpers.build_fixtures", "tests.helpers.fault_shim", "tests.helpers.mem_shim"]


@pytest.fixture(autouse=True)
def _private_pd_budget_cache(tmp_path, monkeypatch):
    """Each test has its own PD budget file: a budget learned by one test never plans another (the
    compile and vetting caches stay shared within TEST_CACHE: they only save time)."""
    monkeypatch.setenv("QNNRT_PD_BUDGET_FILE", str(tmp_path / "pd_budget.json"))


# a test using one of these builds a demo program or creates hundreds of contexts: it is slow
# (`pytest -m "not slow"` is the inner loop); tests slow on their own carry @pytest.mark.slow
SLOW_FIXTURES = {"built_tiny_program", "built_tiny_two_method_program", "built_tiny_grouped_program",
                 "built_pd_program", "chain_pd"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
