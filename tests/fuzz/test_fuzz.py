"""Bounded fuzz run in CI: FUZZ_PER_READER (default 24) mutated inputs per reader through
qnnrt.load + one run in child processes; none may end in a non-QnnrtError exception, a native crash
or a hang. By hand, with thousands: `python tools/fuzz.py --per-reader 2000`."""
from __future__ import annotations

import os

import pytest

from tests.fuzz.corpus import READERS, make_cases, make_seeds
from tests.fuzz.runner import run_cases

PER_READER = int(os.environ.get("FUZZ_PER_READER", "24"))
SEED = int(os.environ.get("FUZZ_SEED", "7"))


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return make_seeds(tmp_path_factory.mktemp("fuzz"))


@pytest.mark.slow
@pytest.mark.parametrize("reader", READERS)
def test_fuzz_reader(reader, seeds, tmp_path):
    cases = make_cases([reader], PER_READER, SEED, seeds, tmp_path / "cases")
    s = run_cases(cases, case_timeout=60, env={"QNNRT_CACHE_DIR": str(tmp_path / "cache")})
    bad = [f"#{o.case.index} {o.case.mutation}: {o.kind}: {o.detail}" for o in s.bad()]
    assert not bad, "\n".join(bad)
    assert len(s.outcomes) == len(cases)
