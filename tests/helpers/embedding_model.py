"""A tiny sentence-embedding model shaped like all-MiniLM-L6-v2's ONNX export (input_ids and
attention_mask of a fixed sequence in, one mean-pooled vector out): an embedding table gathered by
id and averaged over the unmasked positions. Built with `qnnrt build` like any ONNX model."""
from __future__ import annotations

from pathlib import Path

import numpy as np

SEQ = 16
DIM = 8


def table(vocab: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(vocab, DIM)).astype(np.float32)


def reference(ids: np.ndarray, mask: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The float32 sentence embedding of one padded row."""
    m = mask.astype(np.float32)[:, None]
    return (weights[ids] * m).sum(axis=0) / m.sum()


def write_model(path: Path, vocab: int, seq: int = SEQ) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = table(vocab)
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["tokens"], axis=0),          # [1,S,D]
             helper.make_node("Unsqueeze", ["attention_mask", "axis2"], ["mask3"]),            # [1,S,1]
             helper.make_node("Mul", ["tokens", "mask3"], ["masked"]),
             helper.make_node("ReduceSum", ["masked", "axis1"], ["summed"], keepdims=0),       # [1,D]
             helper.make_node("ReduceSum", ["attention_mask", "axis1"], ["count"], keepdims=1),  # [1,1]
             helper.make_node("Div", ["summed", "count"], ["sentence_embedding"])]
    graph = helper.make_graph(
        nodes, "tiny_embedder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT32, [1, seq]),
         helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [1, seq])],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, [1, DIM])],
        [numpy_helper.from_array(w, "table"), numpy_helper.from_array(np.array([2], np.int64), "axis2"),
         numpy_helper.from_array(np.array([1], np.int64), "axis1")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
