"""Time inside QNN's graphExecute per graph call: qnnrt vs ExecuTorch 1.5.1 on the same .pte, with
the ExecuTorch kit's shim counting it, alternating which runtime goes first in each pair (the second run
of a pair was measured slower either way on this machine, so one fixed order shows a false gap).

    bash bench/anchor/setup.sh ANCHOR          # once: the kit (bench/anchor/README.md)
    python bench/et_execute_ab.py tests/data/executorch/many_4_fp16 --rounds 6 [--anchor ANCHOR]
--anchor defaults to $QNNRT_ANCHOR (set by `. ANCHOR/env.sh`).
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.anchor.kit import ET_RUN, QNNRT_SHIM_ENV, add_anchor_argument, anchor_dir, kit_env, shim_lib  # noqa: E402

QNNRT_SIDE = r"""
import os, struct, sys, time, numpy as np, qnnrt
pte, n, inp, shim = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
tf = os.environ["QNN_SHIM_TIME_FILE"]
def counters():
    return struct.unpack("<QQ", open(tf, "rb").read(16)) if os.path.exists(tf) else (0, 0)
with qnnrt.load(pte, residency="eager", backend_lib=shim, options=qnnrt.LoadOptions(vet=False)) as p:
    xs = [np.load(inp)]
    for _ in range(3):
        p.run("forward", xs)
    c0, n0 = counters()
    for _ in range(n):
        p.run("forward", xs)
    c1, n1 = counters()
print(f"graph calls {c1 - c0}, inside graphExecute {(n1 - n0) / 1e6:.1f} ms")
"""


def inside_ms(cmd: list[str], env: dict[str, str]) -> float:
    with tempfile.TemporaryDirectory() as d:
        e = dict(env, QNN_SHIM_TIME_FILE=os.path.join(d, "t.bin"))
        out = subprocess.run(cmd, capture_output=True, text=True, env=e).stdout
    m = re.search(r"inside graphExecute ([0-9.]+)", out)
    if m is None:
        raise SystemExit(f"no timing from {cmd[:2]}: {out[-500:]}")
    return float(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixture", help="a folder with model.pte and forward_input_0.npy")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iterations", type=int, default=100)
    add_anchor_argument(ap)
    a = ap.parse_args()
    anchor = anchor_dir(a.anchor)
    pte, inp = f"{a.fixture}/model.pte", f"{a.fixture}/forward_input_0.npy"
    et_env = kit_env(anchor)
    # this tree's qnnrt
    q_env = dict(et_env, **QNNRT_SHIM_ENV, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    et = [et_env["ET_PY"], str(ET_RUN), pte, "--inputs", inp, "--iteration", str(a.iterations)]
    q = [sys.executable, "-c", QNNRT_SIDE, pte, str(a.iterations), inp, str(shim_lib(anchor))]
    ratios: dict[str, list[float]] = {"ExecuTorch first": [], "qnnrt first": []}
    print(f"load average before: {os.getloadavg()}")
    for r in range(a.rounds):
        for order in ratios:
            if order == "qnnrt first":
                qt, et_t = inside_ms(q, q_env), inside_ms(et, et_env)
            else:
                et_t, qt = inside_ms(et, et_env), inside_ms(q, q_env)
            ratios[order].append(qt / et_t)
            print(f"round {r} {order}: qnnrt {qt:.1f} ms, ExecuTorch {et_t:.1f} ms, ratio {qt / et_t:.3f}")
    for order, rs in ratios.items():
        print(f"{order}: median ratio qnnrt / ExecuTorch {statistics.median(rs):.3f}")
    allr = [x for rs in ratios.values() for x in rs]
    print(f"both orders: median {statistics.median(allr):.3f}; load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
