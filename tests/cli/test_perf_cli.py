"""The performance options and sections of the CLI: run's summary and report, the override, bad values
(exit 1, one message), build recording a default in program.json, inspect showing the compile spec."""
import json

from tests.helpers.data import executorch_pte
from tests.helpers.cli_helpers import qnnrt

PTE = executorch_pte("add_relu_mul_fp16")


def test_run_reports_the_files_vote_and_its_release(tmp_path):
    rep = tmp_path / "r.json"
    r = qnnrt("run", str(PTE), "--report", str(rep), "--quiet")
    assert r.returncode == 0, r.stderr
    assert "performance mode burst (the file's choice): 5/5 perf-infrastructure calls accepted" in r.stdout
    perf = json.loads(rep.read_text())["performance"]
    assert (perf["mode"], perf["source"], perf["rpc_polling_time_us"]) == ("burst", "file", 9999)
    assert [v["function"] for v in perf["votes"]][-1] == "destroyPowerConfigId"
    assert perf["shared_buffers"] == {"asked": False, "on": False, "why": ""}


def test_run_option_overrides_and_rpc_values_are_used(tmp_path):
    rep = tmp_path / "r.json"
    r = qnnrt("run", str(PTE), "--htp-performance-mode", "low_balanced", "--rpc-control-latency", "300",
              "--rpc-polling-time", "50", "--shared-buffer", "--report", str(rep), "--quiet")
    assert r.returncode == 0, r.stderr
    perf = json.loads(rep.read_text())["performance"]
    assert (perf["mode"], perf["source"]) == ("low_balanced", "option")
    assert (perf["rpc_control_latency_us"], perf["rpc_polling_time_us"]) == (300, 50)
    assert perf["shared_buffers"]["asked"] and not perf["shared_buffers"]["on"]
    assert r.stdout.count("note: shared buffers asked for but off") == 1     # said once


def test_bad_performance_values_are_one_message():
    for args in (["--rpc-polling-time", "10000"], ["--rpc-control-latency", "-5"],
                 ["--htp-performance-mode", "turbo"]):
        r = qnnrt("run", str(PTE), *args)
        assert r.returncode in (1, 2) and "Traceback" not in r.stderr, r.stderr
        assert "error" in r.stderr


def test_build_records_the_mode_in_program_json(tmp_path):
    out = tmp_path / "tiny"
    r = qnnrt("build", "--demo", "tiny", "-o", str(out), "--htp-performance-mode", "high-performance")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "program.json").read_text())["target"]["htp_performance_mode"] == \
        "high_performance"
    r = qnnrt("build", "--demo", "tiny", "-o", str(tmp_path / "x"), "--htp-performance-mode", "turbo")
    assert r.returncode == 1 and "unknown --htp-performance-mode 'turbo'" in r.stderr


def test_inspect_shows_what_the_compile_spec_asks_of_the_runtime():
    r = qnnrt("inspect", str(PTE))
    assert r.returncode == 0, r.stderr
    assert "ExecuTorch field layout 1.1+" in r.stdout
    assert "runtime: performance_mode burst, pd_session unsigned, shared_buffer no, use_multi_contexts no" \
        in r.stdout
    d = json.loads(qnnrt("inspect", str(PTE), "--json").stdout)
    assert d["qnn_runtime_options"]["performance_mode"] == "burst"


def test_spill_fill_group_figures_count_the_largest_buffer_once():
    from qnnrt.cli.inspect_pd import spill_fill_group_figures
    ctx = [{"predicted_bytes": 100, "parts": {"spill_fill": 30}},
           {"predicted_bytes": 80, "parts": {"spill_fill": 50}},
           {"predicted_bytes": 60, "parts": {"spill_fill": 0}}]
    assert spill_fill_group_figures(ctx) == {"total_bytes": 240 - 80 + 50, "group_buffer_bytes": 50,
                                             "saved_bytes": 30}
    assert spill_fill_group_figures(ctx + [{"predicted_bytes": None, "parts": {"spill_fill": 1}}]) is None
