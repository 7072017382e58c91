"""qnnrt's HTP perf-infrastructure calls against ExecuTorch's, per .pte, through the ExecuTorch kit's shim
(QNN_SHIM_PERF_LOG; bench/anchor/README.md). Run by hand; results in bench/RESULTS.md.

ExecuTorch side (once per fixture, with the kit made by `bash bench/anchor/setup.sh ANCHOR`):
    . ANCHOR/env.sh
    QNN_SHIM_PERF_LOG=ET_DIR/NAME.log $ET_PY bench/anchor/et_run.py FIXTURES/NAME/model.pte --method M \
        --inputs ... --warm-up 0 --iteration 1
This script runs qnnrt the same way (`qnnrt run --backend-lib <shim> --residency eager --iteration 1`,
QNN_SHIM_NO_FIX=1 QNN_SHIM_KEEP_PLATFORM=1) and compares the two logs line by line, with the power
config id (random per process) replaced by a placeholder:

    python bench/perf_votes.py --et-logs ET_DIR [--fixtures tests/data/executorch] [--anchor ANCHOR] \
        [-- extra run args]
--anchor defaults to $QNNRT_ANCHOR (set by `. ANCHOR/env.sh`).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.anchor.kit import QNNRT_SHIM_ENV, add_anchor_argument, anchor_dir, kit_env, shim_lib  # noqa: E402
from tests.helpers.perf_log import normalized_calls  # noqa: E402

METHOD = {"two_methods_fp16": "prefill", "llama_stories_fp16": "kv_forward"}


def qnnrt_log(pte: Path, method: str, anchor: Path, extra: list[str], out: Path) -> list[str]:
    env = dict(kit_env(anchor), PYTHONPATH=str(ROOT), QNN_SHIM_PERF_LOG=str(out), **QNNRT_SHIM_ENV)
    out.unlink(missing_ok=True)
    r = subprocess.run([sys.executable, "-m", "qnnrt", "run", str(pte), "--method", method,
                        "--iteration", "1", "--residency", "eager", "--no-vet", "--quiet",
                        "--backend-lib", str(shim_lib(anchor)),
                        *extra], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"qnnrt failed on {pte}: {r.stderr[-2000:]}")
    return normalized_calls(out.read_text()) if out.exists() else []


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--et-logs", required=True, type=Path)
    ap.add_argument("--fixtures", type=Path, default=ROOT / "tests" / "data" / "executorch")
    add_anchor_argument(ap)
    ap.add_argument("extra", nargs="*", help="more `qnnrt run` arguments (after --)")
    a = ap.parse_args()
    anchor = anchor_dir(a.anchor)
    tmp = Path(tempfile.mkdtemp(prefix="perf-votes-"))
    same = 0
    names = sorted(p.parent.name for p in a.fixtures.glob("*/model.pte"))
    print(f"{'fixture':22s} {'ExecuTorch calls':>16s} {'qnnrt calls':>11s}  payloads")
    for name in names:
        et = normalized_calls((a.et_logs / f"{name}.log").read_text())
        ours = qnnrt_log(a.fixtures / name / "model.pte", METHOD.get(name, "forward"), anchor,
                         a.extra, tmp / f"{name}.log")
        ok = et == ours
        same += ok
        print(f"{name:22s} {len(et):16d} {len(ours):11d}  {'identical' if ok else 'DIFFERENT'}")
        if not ok:
            for x, y in zip(et, ours):
                if x != y:
                    print(f"    ExecuTorch: {x}\n    qnnrt:      {y}")
                    break
    print(f"{same}/{len(names)} identical apart from the power config id (qnnrt logs in {tmp})")
    return 0 if same == len(names) else 1


if __name__ == "__main__":
    raise SystemExit(main())
