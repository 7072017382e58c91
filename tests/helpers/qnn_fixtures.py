"""Small real context binaries for tests, compiled at test time with ORT's QNN EP (cached)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnnrt.compiler.compile import CompileCache, compile_unit, resolve_soc
from tests.helpers.data import TEST_CACHE

WIDTH = 64


def add_relu_mul(width: int = WIDTH, seed: int = 0, name: str = "arm") -> onnx.ModelProto:
    """y = relu(x + b) * w, with seeded b, w."""
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(width).astype(np.float32)
    w = rng.standard_normal(width).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Relu", ["t"], ["r"]),
         helper.make_node("Mul", ["r", "w"], ["y"])], name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def add_relu_mul_ref(x: np.ndarray, width: int = WIDTH, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(width).astype(np.float32)
    w = rng.standard_normal(width).astype(np.float32)
    return np.maximum(x + b, 0) * w


@dataclass
class BuiltBinary:
    path: Path
    graphs: list[str]


def cache_dir() -> Path:
    return TEST_CACHE / "compiled"


def compile_models(models: list[onnx.ModelProto], labels: list[str], workdir: Path) -> BuiltBinary:
    unit = compile_unit(models, labels, resolve_soc("SM8550"), CompileCache(cache_dir()), workdir)
    return BuiltBinary(Path(unit.bin_path), unit.graph_names)


@pytest.fixture(scope="session")
def small_binary(tmp_path_factory) -> BuiltBinary:
    """One graph: relu(x + b) * w on [1, 64] float32."""
    return compile_models([add_relu_mul()], ["add_relu_mul"], tmp_path_factory.mktemp("small"))


def two_partitions(width: int = WIDTH) -> onnx.ModelProto:
    """relu(x + b) -> Sinh (the QNN EP leaves it to the CPU) -> sigmoid(t * b): ORT compiles the two
    QNN partitions into one context with two graphs."""
    b = numpy_helper.from_array(np.linspace(-1, 1, width).astype(np.float32), "b")
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["t0"]), helper.make_node("Relu", ["t0"], ["t1"]),
         helper.make_node("Sinh", ["t1"], ["t2"]), helper.make_node("Mul", ["t2", "b"], ["t3"]),
         helper.make_node("Sigmoid", ["t3"], ["y"])], "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], [b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def two_partitions_refs(x: np.ndarray, width: int = WIDTH) -> tuple[np.ndarray, np.ndarray]:
    """(graph 1 output for x, graph 2 output for x)"""
    b = np.linspace(-1, 1, width).astype(np.float32)
    return np.maximum(x + b, 0), 1 / (1 + np.exp(-(x * b)))


@pytest.fixture(scope="session")
def two_graph_binary(tmp_path_factory) -> BuiltBinary:
    """One context, two graphs, compiled by ORT's QNN EP from a model with a CPU op between them."""
    from qnnrt.compiler.compile import qnn_session
    d = tmp_path_factory.mktemp("two")
    onnx.save(two_partitions(), d / "two.onnx")
    qnn_session(d / "two.onnx", resolve_soc("SM8550"),
                {"ep.context_enable": "1", "ep.context_embed_mode": "0",
                 "ep.context_file_path": str(d / "two_ctx.onnx")})
    ctx = onnx.load(str(d / "two_ctx.onnx"))
    eps = [n for n in ctx.graph.node if n.op_type == "EPContext"]
    bins = {a.s.decode() for n in eps for a in n.attribute if a.name == "ep_cache_context"}
    assert len(eps) == 2 and len(bins) == 1, (len(eps), bins)
    return BuiltBinary(d / bins.pop(), [n.name for n in eps])


Q_IN = (0.05, 128)   # input scale, zero point (uint8)
Q_OUT = (0.025, 0)   # output scale, zero point


def q8_relu() -> onnx.ModelProto:
    """uint8 in -> dequantize -> relu -> quantize -> uint8 out: QNN graph I/O is UFIXED_POINT_8."""
    g = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["x"]),
         helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("QuantizeLinear", ["r", "s2", "z2"], ["yq"])], "q8",
        [helper.make_tensor_value_info("xq", TensorProto.UINT8, [1, WIDTH])],
        [helper.make_tensor_value_info("yq", TensorProto.UINT8, [1, WIDTH])],
        [numpy_helper.from_array(np.array(Q_IN[0], np.float32), "s"),
         numpy_helper.from_array(np.array(Q_IN[1], np.uint8), "z"),
         numpy_helper.from_array(np.array(Q_OUT[0], np.float32), "s2"),
         numpy_helper.from_array(np.array(Q_OUT[1], np.uint8), "z2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.fixture(scope="session")
def q8_binary(tmp_path_factory) -> BuiltBinary:
    return compile_models([q8_relu()], ["q8_relu"], tmp_path_factory.mktemp("q8"))
