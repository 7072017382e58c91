"""The same program as a .pte and in qnnrt's own format: load time and per-iteration latency.

    python bench/bench_pte.py [--contexts 66] [--iterations 30] [--rounds 3]

Both programs hold N copies of one compiled context binary (one context each) with a CPU multiply
between consecutive graphs: ONNX `Mul` (ONNX Runtime CPU segment) in the EPContext method, and
`aten::mul.Scalar_out` (numpy kernel) in the .pte. Rounds alternate the two formats.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_both(d: Path, n: int) -> tuple[Path, Path]:
    from tests.helpers.pte_writer import chain_pte
    from tests.helpers.program_fixtures import epcontext_node
    from tests.helpers.qnn_fixtures import WIDTH, add_relu_mul, compile_models
    built = compile_models([add_relu_mul()], ["bench"], d)
    data = built.path.read_bytes()
    (d / "contexts").mkdir()
    nodes, h = [], "x"
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    for i in range(n):
        rel = f"contexts/c{i:03d}.bin"
        shutil.copyfile(built.path, d / rel)
        nodes.append(epcontext_node(built.graphs[0], rel, [h], [f"g{i}"]))
        h = f"m{i}"
        nodes.append(helper.make_node("Mul", [f"g{i}", "half"], [h]))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                          [helper.make_tensor_value_info(h, TensorProto.FLOAT, [1, WIDTH])], [half])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    onnx.save(m, str(d / "chain.onnx"))
    chain_pte(d / "chain.pte", data, n, WIDTH)
    return d / "chain.onnx", d / "chain.pte"


def measure(path: Path, iterations: int):
    import qnnrt
    t0 = time.perf_counter()
    prog = qnnrt.load(path, residency="lazy")
    load_s = time.perf_counter() - t0
    try:
        m = prog.method()
        x = np.linspace(-1, 1, m.inputs[0].shape[1], dtype=np.float32)[None]
        out = list(prog.run(m.name, [x]).values())[0]
        first_s = time.perf_counter() - t0
        times = []
        for _ in range(iterations):
            t = time.perf_counter()
            prog.run(m.name, [x])
            times.append(time.perf_counter() - t)
    finally:
        prog.close()
    return load_s, first_s, times, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", type=int, default=66)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as td:
        onnx_path, pte_path = build_both(Path(td), a.contexts)
        res = {"qnnrt program (.onnx)": ([], [], [], None), ".pte": ([], [], [], None)}
        for _ in range(a.rounds):
            for label, p in (("qnnrt program (.onnx)", onnx_path), (".pte", pte_path)):
                load_s, first_s, times, out = measure(p, a.iterations)
                loads, firsts, lat, _ = res[label]
                loads.append(load_s)
                firsts.append(first_s)
                lat.extend(times)
                res[label] = (loads, firsts, lat, out)
        (o1, o2) = (res[k][3] for k in res)
        print(f"{a.contexts} contexts, {a.iterations} iterations x {a.rounds} rounds; outputs "
              f"identical: {bool(np.array_equal(o1, o2))}")
        print("| format | load ms (median) | first output ms | per-iteration ms (median) |")
        print("| --- | --- | --- | --- |")
        meds = {}
        for label, (loads, firsts, lat, _) in res.items():
            meds[label] = (statistics.median(loads), statistics.median(lat))
            print(f"| {label} | {statistics.median(loads) * 1e3:.1f} | {statistics.median(firsts) * 1e3:.1f} "
                  f"| {statistics.median(lat) * 1e3:.2f} |")
        (l1, t1), (l2, t2) = meds.values()
        print(f"ratio .pte / own: load {l2 / l1:.3f}, per-iteration {t2 / t1:.3f}")


if __name__ == "__main__":
    main()
