"""Run one method of a .pte with ExecuTorch's own runtime (the `executorch.runtime` Python API) and time
it; with the shim of this folder as libQnnHtp.so, also the time spent inside QNN's graphExecute, so
that what the runtime itself costs per graph call can be set against qnnrt's.

    bash bench/anchor/setup.sh ANCHOR; . ANCHOR/env.sh
    $ET_PY bench/anchor/et_run.py MODEL.pte [--method forward] [--inputs a.npy,b.npy] [--warm-up 3]
        [--iteration 30] [--output-dir DIR] [--json FILE]

Without --inputs, every input is zeros of the method's declared shape and dtype. Prints each timed
iteration's wall time, their median, the graph calls per iteration and the time inside graphExecute
(counted by the shim through QNN_SHIM_TIME_FILE: the one given, or a temporary file), and the runtime's
cost per graph call = (wall of the timed iterations - time inside graphExecute) / graph calls. With
QNN_SHIM_NOOP_EXEC=1 the graphs cost nothing and that figure is the runtime's work alone (its CPU
kernels included). --output-dir writes the last iteration's outputs as output_<index>.npy.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import struct
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from executorch.runtime import Runtime


class GraphTime:
    """The shim's counters (graphExecute calls, ns inside them), mapped from QNN_SHIM_TIME_FILE."""

    def __init__(self, path: Path):
        with open(path, "a+b") as f:
            if os.fstat(f.fileno()).st_size < 16:
                f.truncate(16)
            self._map = mmap.mmap(f.fileno(), 16)

    def read(self) -> tuple[int, int]:
        calls, ns = struct.unpack_from("<QQ", self._map, 0)
        return calls, ns


# ExecuTorch's ScalarType numbering (that of c10), as the tensor metadata gives it
SCALAR_TYPES = {0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64, 5: torch.float16,
                6: torch.float32, 7: torch.float64, 11: torch.bool, 15: torch.bfloat16}


def inputs_for(method, spec: str | None) -> list[torch.Tensor]:
    if spec:
        return [torch.from_numpy(np.load(p)) for p in spec.split(",")]
    meta = method.metadata
    out = []
    for i in range(meta.num_inputs()):
        t = meta.input_tensor_meta(i)
        dtype = t.dtype()
        dtype = dtype if isinstance(dtype, torch.dtype) else SCALAR_TYPES[int(dtype)]
        out.append(torch.zeros(tuple(t.sizes()), dtype=dtype))
    return out


def save_outputs(outputs, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, y in enumerate(outputs):
        if isinstance(y, torch.Tensor):
            np.save(folder / f"output_{i}.npy", y.detach().numpy())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pte")
    ap.add_argument("--method", default="forward")
    ap.add_argument("--inputs", help="comma-separated .npy files, one per input (default: zeros)")
    ap.add_argument("--warm-up", type=int, default=3, help="untimed iterations first")
    ap.add_argument("--iteration", type=int, default=30, help="timed iterations")
    ap.add_argument("--output-dir", type=Path, help="write the last iteration's outputs here")
    ap.add_argument("--json", type=Path, help="write the figures here as JSON")
    a = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="et_run-") as tmp:
        # set before the program loads: the shim reads its variables when ExecuTorch first asks for it
        os.environ.setdefault("QNN_SHIM_TIME_FILE", str(Path(tmp) / "graph_time.bin"))
        counters = GraphTime(Path(os.environ["QNN_SHIM_TIME_FILE"]))
        method = Runtime.get().load_program(a.pte).load_method(a.method)
        xs = inputs_for(method, a.inputs)
        for _ in range(a.warm_up):
            method.execute(xs)
        wall, calls, inside = [], [], []
        outputs = None
        for _ in range(a.iteration):
            c0, n0 = counters.read()
            t0 = time.perf_counter()
            outputs = method.execute(xs)
            t1 = time.perf_counter()
            c1, n1 = counters.read()
            wall.append(t1 - t0)
            calls.append(c1 - c0)
            inside.append((n1 - n0) / 1e9)
    if a.output_dir and outputs is not None:
        save_outputs(outputs, a.output_dir)

    total_calls = sum(calls)
    res = {
        "pte": a.pte, "method": a.method, "iterations": a.iteration, "warm_up": a.warm_up,
        "wall_ms": [w * 1e3 for w in wall],
        "median_ms": statistics.median(wall) * 1e3 if wall else None,
        "graph_calls": total_calls,
        "graph_calls_per_iteration": total_calls / len(calls) if calls else 0,
        "inside_graph_execute_ms": sum(inside) * 1e3,
        "noop_exec": os.environ.get("QNN_SHIM_NOOP_EXEC", "") not in ("", "0"),
        "runtime_us_per_graph_call": ((sum(wall) - sum(inside)) / total_calls * 1e6) if total_calls else None,
        "median_runtime_us_per_graph_call": (statistics.median(
            (w - s) / c for w, s, c in zip(wall, inside, calls) if c) * 1e6) if total_calls else None,
    }
    print("per-iteration ms: " + " ".join(f"{w:.2f}" for w in res["wall_ms"]))
    if wall:
        print(f"median {res['median_ms']:.3f} ms, min {min(wall) * 1e3:.3f}, max {max(wall) * 1e3:.3f} "
              f"({a.iteration} iterations after {a.warm_up} warm-up)")
    if total_calls:
        print(f"graph calls {total_calls} ({res['graph_calls_per_iteration']:g} per iteration), inside "
              f"graphExecute {res['inside_graph_execute_ms']:.1f} ms, runtime cost per graph call "
              f"{res['runtime_us_per_graph_call']:.2f} us (median iteration: "
              f"{res['median_runtime_us_per_graph_call']:.2f} us)")
    else:
        print("graph calls 0: no graphExecute was counted (is the shim libQnnHtp.so? . ANCHOR/env.sh)")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
