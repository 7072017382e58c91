"""The performance policy: whose choice wins, what each mode votes (ExecuTorch's HtpDevice.cpp values;
ONNX Runtime's for extreme_power_saver), and a program's votes end to end on the simulator:
the file's mode honoured, options override, `default` makes none, released at close, after a failed
load and at interpreter exit, and a per-run override."""
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import qnnrt
from qnnrt.errors import QnnrtError
from qnnrt.runtime import performance as P
from tests.helpers.data import executorch_pte

ADD_RELU = executorch_pte("add_relu_mul_fp16")


# ------------------------------------------------------------------------------------ pure policy
def test_option_beats_file_beats_command_default():
    assert P.choose("balanced", "burst", "burst") == P.Choice("balanced", "option")
    assert P.choose(None, "burst", "power_saver") == P.Choice("burst", "file")
    assert P.choose(None, None, "burst") == P.Choice("burst", "command default")
    assert P.choose(None, None, None) == P.Choice("default", "none")


def test_default_makes_no_vote():
    assert P.choose("default", "burst").plan() is None


@pytest.mark.parametrize("mode,latency,corner,polling,dcvs", [
    ("burst", 40, 0xA0, 9999, 0), ("sustained_high_performance", 100, 0x80, 9999, 0),
    ("high_performance", 100, 0x80, 9999, 0), ("balanced", 1000, 0x70, 0, 0),
    ("low_balanced", 1000, 0x60, 0, 0), ("high_power_saver", 1000, 0x50, 0, 0),
    ("power_saver", 1000, 0x40, 0, 0), ("low_power_saver", 1000, 0x30, 0, 0),
    ("extreme_power_saver", 1000, 0x10, 0, 1)])
def test_mode_table_matches_the_public_runtimes(mode, latency, corner, polling, dcvs):
    plan = P.Choice(mode, "option").plan()
    assert (plan.up.sleep_latency_us, plan.up.bus_corner, plan.up.core_corner, plan.up.dcvs_enable) == \
        (latency, corner, corner, dcvs)
    assert (plan.rpc_control_latency_us, plan.rpc_polling_time_us) == (100, polling)
    assert plan.down == P.DOWN_VOTE


def test_rpc_options_replace_the_modes_and_are_checked():
    plan = P.choose("burst", None, rpc_control_latency_us=250, rpc_polling_time_us=0).plan()
    assert (plan.rpc_control_latency_us, plan.rpc_polling_time_us) == (250, 0)
    with pytest.raises(QnnrtError, match="over QNN's maximum of 9999"):
        P.choose("burst", None, rpc_polling_time_us=10000)
    with pytest.raises(QnnrtError, match="whole number of microseconds"):
        P.choose("burst", None, rpc_control_latency_us=-1)


def test_unknown_mode_is_a_clear_error():
    with pytest.raises(QnnrtError, match="unknown performance mode 'turbo'; use one of default, burst"):
        P.choose("turbo", None)
    assert P.check_mode("High-Performance") == "high_performance"


# -------------------------------------------------------------------------------- on the simulator
def _feed(prog):
    m = prog.method()
    return {s.name: np.zeros(s.shape, s.dtype) for s in m.inputs}


def test_a_pte_votes_what_its_compile_spec_says_and_releases_it_at_close():
    prog = qnnrt.load(ADD_RELU)
    perf = prog.performance
    assert (perf.choice.mode, perf.choice.source) == ("burst", "file")
    prog.run(None, _feed(prog))
    prog.close()
    j = perf.to_json()
    assert [v["function"] for v in j["votes"]] == ["createPowerConfigId", "setPowerConfig",
                                                   "setPowerConfig", "setPowerConfig",
                                                   "destroyPowerConfigId"]
    assert all(v["accepted"] for v in j["votes"]) and j["notes"] == []
    assert (j["rpc_control_latency_us"], j["rpc_polling_time_us"]) == (100, 9999)
    assert "burst (the file's choice): 5/5" in j["summary"]


def test_the_option_overrides_the_file_and_default_votes_nothing():
    with qnnrt.load(ADD_RELU, options=qnnrt.LoadOptions(performance_mode="power_saver")) as prog:
        assert (prog.performance.choice.mode, prog.performance.choice.source) == ("power_saver", "option")
        assert prog.performance.to_json()["rpc_polling_time_us"] == 0
    with qnnrt.load(ADD_RELU, options=qnnrt.LoadOptions(performance_mode="default",
                                                         rpc_polling_time_us=5)) as prog:
        assert prog.performance.vote is None and prog.performance.to_json()["votes"] == []
        assert prog.performance.notes() == ["RPC settings given but not sent: performance mode "
                                            "default makes no vote"]
        with pytest.raises(QnnrtError, match="makes no vote"):
            with prog.performance.override("burst"):
                pass


def test_per_run_override_votes_and_restores():
    with qnnrt.load(ADD_RELU) as prog:
        vote = prog.performance.vote
        n = len(vote.calls)
        with prog.performance.override("low_power_saver"):
            prog.run(None, _feed(prog))
            assert vote.plan.up.bus_corner == 0x30
        assert vote.plan.up.bus_corner == 0xA0 and len(vote.calls) == n + 4
        assert all(c.accepted for c in vote.calls)


def test_a_failed_load_releases_the_vote(monkeypatch):
    """A failure after the vote (here: building the methods) still downvotes and destroys the id."""
    made = []
    real = P.Performance.start

    def spy(self, backend):
        made.append(self)
        real(self, backend)

    monkeypatch.setattr(P.Performance, "start", spy)
    import qnnrt.loader as loader

    class Boom(Exception):
        pass

    def failing_program(*a, **k):
        raise Boom("methods could not be built")
    monkeypatch.setattr(loader, "Program", failing_program)
    with pytest.raises(Boom):
        qnnrt.load(ADD_RELU)
    (perf,) = made
    assert perf.vote is not None and perf.vote.closed
    assert [c.function for c in perf.vote.calls][-2:] == ["setPowerConfig", "destroyPowerConfigId"]


def test_a_program_never_closed_is_released_at_interpreter_exit(tmp_path):
    """The check runs after qnnrt's own exit handler (atexit is last in, first out)."""
    script = textwrap.dedent(f"""
        import atexit
        box = {{}}
        def check():
            v = box["perf"].vote
            print("RELEASED", v.closed, [c.function for c in v.calls][-2:])
        atexit.register(check)
        import qnnrt
        prog = qnnrt.load({str(ADD_RELU)!r})
        box["perf"] = prog.performance
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert "RELEASED True ['setPowerConfig', 'destroyPowerConfigId']" in r.stdout, r.stderr[-2000:]


def test_shared_buffers_and_spill_fill_groups_are_off_here_and_say_why():
    opts = qnnrt.LoadOptions(shared_buffer=True)
    with qnnrt.load(ADD_RELU, options=opts) as prog:
        perf = prog.performance
        P.describe_optimizations(perf, {"use_multi_contexts": True, "max_sf_buf_size": 1 << 20},
                                 True, prog.backend)
        j = perf.to_json()
    assert j["shared_buffers"]["asked"] and not j["shared_buffers"]["on"]
    assert "libcdsprpc" in j["shared_buffers"]["why"]
    assert j["spill_fill_group"]["asked"] and not j["spill_fill_group"]["on"]
    assert "5010" in j["spill_fill_group"]["why"]
    assert sum("asked for but off" in n for n in j["notes"]) == 2


def _with_mode(src: Path, dst: Path, mode) -> Path:
    import json
    import shutil
    shutil.copytree(src, dst)
    m = json.loads((dst / "program.json").read_text())
    m["target"]["htp_performance_mode"] = mode
    (dst / "program.json").write_text(json.dumps(m))
    return dst


def test_program_json_records_the_default_and_options_override_it(two_method_program, tmp_path):
    prog_dir = _with_mode(two_method_program, tmp_path / "p", "high_performance")
    with qnnrt.load(prog_dir) as prog:
        assert (prog.performance.choice.mode, prog.performance.choice.source) == ("high_performance", "file")
        assert all(c.accepted for c in prog.performance.vote.calls)
    with qnnrt.load(prog_dir, options=qnnrt.LoadOptions(performance_mode="default")) as prog:
        assert prog.performance.vote is None
    bad = _with_mode(two_method_program, tmp_path / "bad", "turbo")
    with pytest.raises(QnnrtError, match=r"unknown performance mode recorded in .*program.json 'turbo'"):
        qnnrt.load(bad)


def test_a_command_default_applies_where_the_file_says_nothing(two_method_program):
    """What `qnnrt llm` does (burst, as qnn_llama_runner) on a program without a recorded mode."""
    with qnnrt.load(two_method_program, options=qnnrt.LoadOptions(performance_mode_default="burst")) as prog:
        assert (prog.performance.choice.mode, prog.performance.choice.source) == ("burst", "command default")
    with qnnrt.load(two_method_program) as prog:
        assert (prog.performance.choice.mode, prog.performance.choice.source) == ("default", "none")
        assert prog.performance.vote is None


def test_a_signed_pd_session_in_the_compile_spec_creates_a_signed_pd_device(monkeypatch):
    """ExecuTorch adds HTP device config option 2 for pd_session = signed; so does qnnrt (the
    simulator accepts it)."""
    import qnnrt.executorch.program as ep
    real = ep.pte_runtime_options
    monkeypatch.setattr(ep, "pte_runtime_options", lambda prog: {**real(prog), "pd_session": "signed"})
    with qnnrt.load(ADD_RELU) as prog:
        assert prog.backend.signed_pd and prog.performance.to_json()["pd_session"] == "signed"
        prog.run(None, _feed(prog))
    monkeypatch.undo()
    with qnnrt.load(ADD_RELU) as prog:
        assert not prog.backend.signed_pd and prog.performance.to_json()["pd_session"] == "unsigned"
