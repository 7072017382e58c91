"""w4a16's weights: symmetric int4 in blocks of BLOCK input channels, one float scale per block and
output channel (ONNX opset 21's blocked DequantizeLinear, which ONNX Runtime's QNN EP lowers to QNN's
block quantization; the v73 HTP simulator compiles and runs it, 4 bits a weight in the binary).

ONNX Runtime's QNN quantizer writes the blocked Q/DQ ("BlockSize"); here:
- the lm head gets an explicit int8 per-channel encoding, and the MatMul weights the blocks cannot take
  (unblocked_overrides) int8 per tensor (the quantizer's block path skips a tensor whose encoding is
  given);
- each block's scale is then re-chosen for the least squared error over clipping ratios (round to
  nearest at the largest |w| wastes levels on one outlier), replacing the quantizer's int4 values."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BLOCK = 32                                  # input channels per scale (QNN: a multiple of 8 for 4 bits)
RATIOS = np.linspace(0.5, 1.0, 11)          # clipping ratios tried per block
QMIN, QMAX = -8, 7


def matmul_weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The float weights of the model's MatMuls with a constant right-hand side, by name."""
    inits = {t.name: t for t in model.graph.initializer}
    return {n.input[1]: numpy_helper.to_array(inits[n.input[1]]) for n in model.graph.node
            if n.op_type == "MatMul" and n.input[1] in inits}


def _activation_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Every tensor's shape, inferred on a copy that keeps only the small initializers' data (the
    Reshape shapes; weights become typed inputs), so the part's weights are not copied."""
    g = model.graph
    small = [t for t in g.initializer if np.prod(t.dims) <= 64]
    typed = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in g.initializer
             if np.prod(t.dims) > 64]
    light = helper.make_model(helper.make_graph(list(g.node), g.name, list(g.input) + typed, list(g.output), small),
                              opset_imports=list(model.opset_import))
    light.ir_version = model.ir_version
    inferred = onnx.shape_inference.infer_shapes(light).graph
    return {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in list(inferred.value_info) + list(inferred.input)}


def _head(model: onnx.ModelProto) -> str | None:
    """The weight of the MatMul that makes the graph's logits (through Identity), if this part has it."""
    made = {o: n for n in model.graph.node for o in n.output}
    n = made.get("logits")
    while n is not None and n.op_type == "Identity":
        n = made.get(n.input[0])
    return n.input[1] if n is not None and n.op_type == "MatMul" else None


def unblocked_overrides(model: onnx.ModelProto, block: int = BLOCK) -> dict[str, list[dict[str, Any]]]:
    """Quantizer overrides for the MatMul weights that stay int8 (symmetric): the lm head, per output
    channel (4 bits cost the most there: SmolLM2-135M's perplexity in numpy +26% with int4 blocks on the
    projections, +42% with the head too); per tensor, the weights that cannot take blocks: input channels
    not a multiple of ``block``, or an activation with more than one row of matrices (the RoPE rotation
    of [tokens, heads, head_dim]: QNN's finalize of that block-quantized MatMul fails with
    QNN_COMMON_ERROR_MEM_ALLOC on the v73 simulator)."""
    from onnxruntime.quantization import QuantType
    shapes = _activation_shapes(model)
    inits = {t.name: t for t in model.graph.initializer}
    head = _head(model)
    out: dict[str, list[dict[str, Any]]] = {}
    for n in model.graph.node:
        if n.op_type != "MatMul" or n.input[1] not in inits:
            continue
        dims, act = list(inits[n.input[1]].dims), shapes.get(n.input[0])
        batched = act is None or int(np.prod(act[:-2], dtype=np.int64)) != 1   # an unknown dim (0) too
        if n.input[1] == head and len(dims) == 2:
            w = numpy_helper.to_array(inits[n.input[1]])
            scales = np.maximum(np.abs(w).max(axis=0), 1e-12) / 127
            out[n.input[1]] = [{"quant_type": QuantType.QInt8, "axis": 1, "scale": np.array(sc, np.float32),
                                "zero_point": np.array(0, np.int8)} for sc in scales]
        elif len(dims) != 2 or dims[0] % block or batched:
            w = numpy_helper.to_array(inits[n.input[1]])
            scale = max(float(np.abs(w).max()), 1e-12) / 127
            out[n.input[1]] = [{"quant_type": QuantType.QInt8, "scale": np.array(scale, np.float32),
                                "zero_point": np.array(0, np.int8)}]
    return out


def block_quantize(w: np.ndarray, block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """(q int8 in [-8, 7] shaped as w [K, N], scales float32 [K / block, N]): per block of ``block``
    input channels, the scale of least squared error among RATIOS of max |w| / 7."""
    K, N = w.shape
    wb = w.astype(np.float32).reshape(K // block, block, N)
    amax = np.abs(wb).max(axis=1, keepdims=True)
    amax = np.where(amax > 0, amax, 1.0).astype(np.float32)
    best_s = amax / QMAX
    best_e = np.full(amax.shape, np.inf, np.float32)
    for r in RATIOS:
        s = (amax * np.float32(r) / QMAX).astype(np.float32)
        err = ((np.clip(np.round(wb / s), QMIN, QMAX) * s - wb) ** 2).sum(axis=1, keepdims=True)
        better = err < best_e
        best_s, best_e = np.where(better, s, best_s), np.where(better, err, best_e)
    q = np.clip(np.round(wb / best_s), QMIN, QMAX).astype(np.int8).reshape(K, N)
    return q, best_s.reshape(K // block, N)


def int4_tensor(name: str, q: np.ndarray) -> onnx.TensorProto:
    """An ONNX INT4 initializer of ``q`` (two values a byte, the first in the low nibble)."""
    flat = (q.reshape(-1).astype(np.int16) & 0xF).astype(np.uint8)
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    t = TensorProto()
    t.name, t.data_type = name, TensorProto.INT4
    t.dims.extend(q.shape)
    t.raw_data = (flat[0::2] | (flat[1::2] << 4)).tobytes()
    return t


def refine_blocks(quantized: onnx.ModelProto, weights: dict[str, np.ndarray]) -> int:
    """Replace each blocked int4 weight's values and scales in ``quantized`` by block_quantize of its
    float weight (``weights``: the float model's MatMul weights by name); returns how many."""
    g = quantized.graph
    index = {t.name: i for i, t in enumerate(g.initializer)}
    done = 0
    for n in g.node:
        attrs = {a.name: a for a in n.attribute}
        if n.op_type != "DequantizeLinear" or "block_size" not in attrs or n.input[0] not in index:
            continue
        src = n.input[0].removesuffix("_quantized")
        w, block = weights.get(src), attrs["block_size"].i
        if w is None or w.ndim != 2 or w.shape[0] % block:
            continue
        q, s = block_quantize(w, block)
        g.initializer[index[n.input[0]]].CopyFrom(int4_tensor(n.input[0], q))
        g.initializer[index[n.input[1]]].CopyFrom(numpy_helper.from_array(s, n.input[1]))
        done += 1
    return done


__all__ = ["BLOCK", "block_quantize", "int4_tensor", "matmul_weights", "refine_blocks", "unblocked_overrides"]
