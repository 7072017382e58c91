"""Programs assembled by hand from real compiled binaries, to test the runtime independently of the
builder: a chain of N contexts with CPU nodes between them, and two methods sharing one context."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.helpers.qnn_fixtures import (WIDTH, BuiltBinary, add_relu_mul, add_relu_mul_ref,
                                compile_models)

DISTINCT = 4  # distinct compiled binaries; longer chains reuse them as separate files


def epcontext_node(graph: str, binary_rel: str, inputs: list[str], outputs: list[str],
                   main: int = 1) -> onnx.NodeProto:
    return helper.make_node("EPContext", inputs, outputs, name=graph, domain="com.microsoft",
                            main_context=main, ep_cache_context=binary_rel, embed_mode=0,
                            partition_name=graph, source="QNNExecutionProvider")


def save_model(nodes, inputs, outputs, path: Path) -> None:
    g = helper.make_graph(nodes, path.stem, inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    onnx.save(m, str(path))


@dataclass
class ChainProgram:
    model: Path          # the EPContext .onnx (one method)
    n: int

    def reference(self, x: np.ndarray) -> np.ndarray:
        h = x
        for i in range(self.n):
            h = add_relu_mul_ref(h, seed=i % DISTINCT)
            h = np.tanh(h)
        return h


@pytest.fixture(scope="session")
def distinct_binaries(tmp_path_factory) -> list[BuiltBinary]:
    d = tmp_path_factory.mktemp("distinct")
    return [compile_models([add_relu_mul(seed=s, name=f"s{s}")], [f"s{s}"], d)
            for s in range(DISTINCT)]


def make_chain(folder: Path, binaries: list[BuiltBinary], n: int, corrupt: int | None = None) -> ChainProgram:
    """x -> [graph of context i] -> Tanh (CPU) -> ... n times."""
    (folder / "contexts").mkdir(parents=True, exist_ok=True)
    nodes, h = [], "x"
    for i in range(n):
        b = binaries[i % len(binaries)]
        rel = f"contexts/c{i:03d}.bin"
        if corrupt == i:
            data = b.path.read_bytes()
            (folder / rel).write_bytes(data[: len(data) // 2])
        else:
            shutil.copyfile(b.path, folder / rel)
        nodes.append(epcontext_node(b.graphs[0], rel, [h], [f"g{i}"]))
        h = f"t{i}"
        nodes.append(helper.make_node("Tanh", [f"g{i}"], [h], name=f"tanh{i}"))
    save_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
               [helper.make_tensor_value_info(h, TensorProto.FLOAT, [1, WIDTH])],
               folder / "chain.onnx")
    return ChainProgram(folder / "chain.onnx", n)


@pytest.fixture(scope="session")
def chain12(tmp_path_factory, distinct_binaries) -> ChainProgram:
    return make_chain(tmp_path_factory.mktemp("chain12"), distinct_binaries, 12)


@pytest.fixture(scope="session")
def chain_pd(tmp_path_factory, distinct_binaries) -> ChainProgram:
    """400 contexts of ~10 MB PD estimate each: more than the simulator's ~3.64 GB PD holds."""
    return make_chain(tmp_path_factory.mktemp("chainpd"), distinct_binaries, 400)


@pytest.fixture(scope="session")
def two_method_program(tmp_path_factory, two_graph_binary) -> Path:
    """Program folder: methods 'first' and 'second' each call one graph of the same context."""
    d = tmp_path_factory.mktemp("twomethod")
    (d / "contexts").mkdir()
    shutil.copyfile(two_graph_binary.path, d / "contexts" / "shared.bin")
    g1, g2 = two_graph_binary.graphs
    for name, graph in (("first", g1), ("second", g2)):
        save_model([epcontext_node(graph, "contexts/shared.bin", ["x"], ["y"],
                                   main=int(name == "first"))],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
                   d / f"{name}.onnx")
    manifest = {"format": "qnnrt-program", "version": 1, "target": {"soc_model": 43},
                "methods": [{"name": "first", "model": "first.onnx"},
                            {"name": "second", "model": "second.onnx"}],
                "contexts": [{"name": "shared", "path": "contexts/shared.bin",
                              "size": (d / "contexts" / "shared.bin").stat().st_size,
                              "graphs": [g1, g2]}]}
    (d / "program.json").write_text(json.dumps(manifest))
    return d
