"""`qnnrt run` and `qnnrt llm` survive a transient graph-call failure injected into a real run (the
forwarding shim of tests/helpers/fault_shim.py; counts are per process: the CLI's worker counts from
1), say so (a warning line, the summary, the report), and end cleanly when it cannot be recovered."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


from tests.helpers.cli_helpers import ROOT
from tests.helpers.data import EXECUTORCH, LLM_STORIES

TWO = EXECUTORCH / "two_methods_fp16"
LLM = LLM_STORIES


def _cli(shim, fail: str | None, *args: str) -> subprocess.CompletedProcess:
    env = shim.env(fail)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "qnnrt.cli", *map(str, args), "--no-vet",
                        "--backend-lib", str(shim.folder)], capture_output=True, text=True, timeout=900,
                       env=env)
    assert r.returncode >= 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    return r


def _run_two(shim, fail, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return _cli(shim, fail, "run", TWO / "model.pte", "--method", "prefill,decode", "--iteration", "6",
                "--inputs", f"prefill={TWO / 'prefill_input_0.npy'}",
                "--inputs", f"decode={TWO / 'decode_input_0.npy'}",
                "--output-dir", out, "--report", out.with_suffix(".json"), *extra)


def test_run_recovers_one_failure_with_every_output_equal_to_a_clean_run(fault_shim, tmp_path):
    clean = _run_two(fault_shim, None, tmp_path / "clean", "--check-repeat")
    assert clean.returncode == 0, clean.stderr
    r = _run_two(fault_shim, "3", tmp_path / "faulty", "--check-repeat")   # iteration 3 of 6
    assert r.returncode == 0, r.stderr
    warn = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warn) == 1 and "'prefill'" in warn[0] and "1100" in warn[0] and "re-creating" in warn[0]
    assert "recoveries: 1 of 1 succeeded" in r.stdout
    assert "check-repeat: 0 mismatching" in r.stdout
    rec = json.loads((tmp_path / "faulty.json").read_text())["recoveries"]
    assert (rec["tried"], rec["succeeded"], rec["max_recoveries"]) == (1, 1, 3)
    (x,) = rec["records"]
    assert (x["graph"], x["iteration"], x["code"], x["code_name"], x["recreated"]) == \
        ("prefill", 2, 1100, "QNN_COMMON_ERROR_GENERAL", "context")
    assert x["seconds"] > 0 and x["contexts"]
    assert json.loads((tmp_path / "clean.json").read_text())["recoveries"]["tried"] == 0
    files = sorted(p.name for p in (tmp_path / "clean").iterdir())
    assert len([f for f in files if f.endswith(".raw")]) == 12    # 6 iterations x 2 outputs
    assert files == sorted(p.name for p in (tmp_path / "faulty").iterdir())
    for f in files:
        assert (tmp_path / "clean" / f).read_bytes() == (tmp_path / "faulty" / f).read_bytes(), f


def test_run_ends_cleanly_when_the_failure_persists(fault_shim, tmp_path):
    r = _run_two(fault_shim, "5-", tmp_path / "out", "--max-recoveries", "2")   # from iteration 5 on
    assert r.returncode == 1
    err = [line for line in r.stderr.splitlines() if line.startswith("qnnrt run: error:")]
    assert len(err) == 1
    for part in ("QNN error 1100", "QNN_COMMON_ERROR_GENERAL", "'prefill'", "not recovered after 2"):
        assert part in err[0], part
    assert "What to do:" in r.stderr and "--max-recoveries" in r.stderr
    assert sum(line.startswith("WARNING") for line in r.stderr.splitlines()) == 2
    kept = sorted(p.name for p in (tmp_path / "out").iterdir())    # iterations 0..3 were written
    assert kept == sorted(f"output_{i}_{j}.raw" for i in range(4) for j in range(2))


def test_run_refuses_a_negative_budget(fault_shim, tmp_path):
    r = _run_two(fault_shim, None, tmp_path / "out", "--max-recoveries", "-1")
    assert r.returncode == 1 and "max_recoveries" in r.stderr


def test_llm_decode_loop_survives_a_failure_with_the_same_tokens(fault_shim, tmp_path):
    meta = json.loads((LLM / "meta.json").read_text())
    args = ["llm", LLM / "model.pte", "--prompt-tokens", ",".join(map(str, meta["prompt"])),
            "--max-new-tokens", str(len(meta["greedy_tokens"]))]
    clean = _cli(fault_shim, None, *args, "--report", tmp_path / "clean.json")
    assert clean.returncode == 0, clean.stderr
    r = _cli(fault_shim, "4", *args, "--report", tmp_path / "faulty.json")   # the 3rd decode step
    assert r.returncode == 0, r.stderr
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("clean.json", "faulty.json"))
    assert b["generated_tokens"] == a["generated_tokens"] == meta["greedy_tokens"]
    (x,) = b["recoveries"]["records"]
    assert x["graph"] == "kv_forward" and x["succeeded"]
    assert "recoveries: 1 of 1 succeeded" in r.stdout
    assert any(line.startswith("WARNING") and "kv_forward" in line for line in r.stderr.splitlines())
