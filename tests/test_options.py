"""LoadOptions is validated when made and immutable; the keyword shortcuts of `qnnrt.load` override
its residency / SoC / library; one log-level table serves QNN, Python logging and the CLI."""
import dataclasses
import logging

import pytest

import qnnrt
from qnnrt.core import LOG_LEVEL_NAMES, LogLevel
from qnnrt.errors import QnnrtError
from qnnrt.runtime.residency import Residency
from qnnrt.runtime.residency.policies.auto import Auto
from qnnrt.runtime.residency.policies.bounded import Bounded
from qnnrt.runtime.residency.policies.eager import Eager
from qnnrt.runtime.residency.policies.sequential import Sequential


def test_options_are_parsed_when_made():
    o = qnnrt.LoadOptions(residency="bounded:3", soc="SM8550", pd_budget="1GiB", log_level="info")
    assert o.policy == Bounded(max_live=3) == Residency.parse("bounded:3")
    assert o.soc == 43 and o.pd_budget == 1 << 30
    assert qnnrt.LoadOptions().policy == Auto() and str(Auto()) == "auto"


@pytest.mark.parametrize("bad, match", [
    (dict(log_level="loud"), "unknown log level 'loud'; use error, warn, info, verbose, debug"),
    (dict(profile_level="max"), "unknown profile level 'max'"),
    (dict(residency="greedy"), "unknown residency 'greedy'"),
    (dict(soc="SM9999"), "unknown SoC 'SM9999'"),
    (dict(pd_budget="lots"), "PD budget"),
    (dict(vet="maybe"), "unknown vet mode 'maybe'; use True, False or one of auto, execute, create, worker"),
])
def test_a_bad_option_is_a_clear_error(bad, match):
    with pytest.raises(QnnrtError, match=match):
        qnnrt.LoadOptions(**bad)


def test_options_are_frozen():
    o = qnnrt.LoadOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.log_level = "debug"  # type: ignore[misc]
    assert dataclasses.replace(o, log_level="debug").log_level == "debug" and o.log_level == "warn"


def test_load_shortcuts_override_options(chain12):
    opts = qnnrt.LoadOptions(residency="eager")
    with qnnrt.load(chain12.model, options=opts) as prog:
        assert prog.pool.residency == Eager()
    with qnnrt.load(chain12.model, residency="sequential", options=opts) as prog:
        assert prog.pool.residency == Sequential()


def test_one_log_level_table():
    assert LOG_LEVEL_NAMES == ("error", "warn", "info", "verbose", "debug")
    assert [int(LogLevel.parse(n)) for n in LOG_LEVEL_NAMES] == [1, 2, 3, 4, 5]   # QnnLog_Level_t
    assert LogLevel.parse("WARN") is LogLevel.WARN
    assert [LogLevel.parse(n).python_level for n in LOG_LEVEL_NAMES] == [
        logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG, logging.DEBUG]
    import argparse

    from qnnrt.cli.run import add_parser
    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    run = sub.choices["run"]
    for name in LOG_LEVEL_NAMES:   # the CLI's choices come from the same table
        assert run.parse_args(["x.bin", "--log-level", name]).log_level == name
    with pytest.raises(SystemExit):
        run.parse_args(["x.bin", "--log-level", "loud"])
