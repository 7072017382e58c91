"""Graph.execute and Program.run (the compiled plan) of qnnrt vs onnxruntime session.run (QNN EP)
on the same EPContext model.

    python bench/bench_execute.py [--calls 2000] [--width 64]

Both run in one process, interleaved in rounds so machine noise hits both alike; prints median
microseconds per call and the ratio qnnrt / ORT.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build(width: int, workdir: Path) -> tuple[Path, Path, str]:
    """An EPContext model + its binary for add_relu_mul at `width`."""
    from qnnrt.compiler.compile import qnn_session
    from tests.helpers.qnn_fixtures import add_relu_mul
    src = workdir / "m.onnx"
    onnx.save(add_relu_mul(width), src)
    qnn_session(src, config={"ep.context_enable": "1", "ep.context_embed_mode": "0",
                             "ep.context_file_path": str(workdir / "m_ctx.onnx")})
    ctx = onnx.load(str(workdir / "m_ctx.onnx"))
    node = next(n for n in ctx.graph.node if n.op_type == "EPContext")
    binary = next(a.s.decode() for a in node.attribute if a.name == "ep_cache_context")
    return workdir / "m_ctx.onnx", workdir / binary, node.name


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    from qnnrt.compiler.compile import qnn_session
    from qnnrt.core import Backend, Context, ContextBinary
    with tempfile.TemporaryDirectory() as d:
        model, binary, graph_name = build(a.width, Path(d))
        x = np.random.default_rng(0).standard_normal((1, a.width)).astype(np.float32)
        sess = qnn_session(model)
        import qnnrt
        with qnnrt.load(model, residency="eager") as prog, Backend(soc="SM8550") as be, \
                Context(be, ContextBinary(binary)) as ctx:
            g = ctx.graph(graph_name)
            feed = {"x": x}
            y_q = g.execute(feed)["y"]
            y_o = sess.run(None, feed)[0]
            assert np.array_equal(y_q, y_o), abs(y_q - y_o).max()
            assert np.array_equal(prog.run(None, feed)["y"], y_o)
            for _ in range(200):  # warm all
                g.execute(feed)
                sess.run(None, feed)
                prog.run(None, feed)
            tq, to, tp = [], [], []
            per = a.calls // a.rounds
            for _ in range(a.rounds):
                for _ in range(per):
                    t0 = time.perf_counter()
                    g.execute(feed)
                    tq.append(time.perf_counter() - t0)
                for _ in range(per):
                    t0 = time.perf_counter()
                    sess.run(None, feed)
                    to.append(time.perf_counter() - t0)
                for _ in range(per):
                    t0 = time.perf_counter()
                    prog.run(None, feed)
                    tp.append(time.perf_counter() - t0)
        mq, mo = statistics.median(tq) * 1e6, statistics.median(to) * 1e6
        print(f"width {a.width}, {len(tq)} calls each (outputs identical: yes)")
        print("| runner | median us/call | p90 us/call |")
        print("| --- | --- | --- |")
        print(f"| qnnrt Graph.execute | {mq:.1f} | {np.percentile(tq, 90) * 1e6:.1f} |")
        print(f"| ORT session.run (QNN EP) | {mo:.1f} | {np.percentile(to, 90) * 1e6:.1f} |")
        mp = statistics.median(tp) * 1e6
        print(f"| qnnrt Program.run (compiled plan) | {mp:.1f} | {np.percentile(tp, 90) * 1e6:.1f} |")
        print(f"ratio qnnrt Graph.execute/ORT: {mq / mo:.3f}; Program.run/ORT: {mp / mo:.3f}")


if __name__ == "__main__":
    main()
