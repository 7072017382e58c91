"""w8a16: the part graphs as QDQ ONNX (8-bit weights, 16-bit activations, an 8-bit KV cache) that
ONNX Runtime's QNN EP compiles into fixed-point graphs whose I/O carry the scale / offset Genie
reads from the binary. Calibration runs the float graphs on ONNX Runtime's CPU EP the way Genie
runs them, over a text (--calibration, or a built-in paragraph).

Every tensor name more than one graph sees (prompt and token graphs, a part's output and the next
part's input, past_*_in and past_*_out) gets ONE encoding, as Genie requires:
- activations: uint16 over the calibrated range; KV cache: uint8 with zero point 128 (Genie clears a
  quantized cache to 128, which must read 0.0); attention_mask: uint16, 65535 -> 0.0 and 0 -> -1000;
  position_ids_cos / _sin: uint16 over [-1, 1]; input_ids stays int32."""
from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from qnnrt.convert.drive import cpu_caller, run_parts
from qnnrt.convert.graphs import MASKED, PartPlan, part_model
from qnnrt.convert.options import ConvertOptions
from qnnrt.convert.source import Source
from qnnrt.convert.steps import Steps
from qnnrt.errors import BuildError

U16 = 65535
FEEDS_PER_GRAPH = 6       # calibration inputs kept per graph (each holds the part's whole KV cache)
DEFAULT_TEXT = (
    "The sun rose over the quiet valley, and the river carried the light of morning past the old mill. "
    "In the village, people opened their windows, children ran to school, and the baker set out fresh bread. "
    "What is the capital of France? The capital of France is Paris, a city on the Seine known for its museums. "
    "def add(a, b):\n    return a + b\n\nNumbers such as 3.14, 42 and 1,000 appear in many texts. "
    "Scientists measure, engineers build, and writers tell stories about all of them.")


@dataclass(frozen=True)
class Encoding:
    """value = (q - zero_point) * scale; QNN's offset is -zero_point."""
    bits: int
    scale: float
    zero_point: int


def _group(name: str) -> str:
    return re.sub(r"_(in|out)$", "", name) if name.startswith("past_") else name


def encodings(ranges: dict[str, tuple[float, float]], masked: float = MASKED) -> dict[str, Encoding]:
    """One encoding per I/O tensor name from the calibrated (min, max); the mask's over [masked, 0]."""
    merged: dict[str, tuple[float, float]] = {}
    for name, (lo, hi) in ranges.items():
        a, b = merged.get(_group(name), (lo, hi))
        merged[_group(name)] = (min(a, lo), max(b, hi))
    out: dict[str, Encoding] = {}
    for name in ranges:
        lo, hi = merged[_group(name)]
        if name == "input_ids":
            continue
        if name == "attention_mask":
            out[name] = Encoding(16, -masked / U16, U16)
        elif name.startswith("position_ids_"):
            out[name] = Encoding(16, 2.0 / U16, 32768)
        elif name.startswith("past_"):
            out[name] = Encoding(8, max(abs(lo), abs(hi), 1e-6) * 1.05 / 127, 128)
        else:
            lo, hi = min(lo, 0.0) * 1.05, max(hi, 1e-6) * 1.05
            scale = (hi - lo) / U16
            out[name] = Encoding(16, scale, int(round(-lo / scale)))
    return out


def quantize_part(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], io: dict[str, Encoding],
                  work: Path, precision: str = "w8a16") -> onnx.ModelProto:
    """``model`` as QDQ calibrated on ``feeds``, its float I/O replaced by the quantized tensors.
    w8a16: uint8 weights per tensor; w4a16: int4 weights in blocks (convert/weights4.py)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    qtype = {16: QuantType.QUInt16, 8: QuantType.QUInt8}
    names = {vi.name for vi in list(model.graph.input) + list(model.graph.output)}
    overrides = {n: [{"quant_type": qtype[e.bits], "scale": np.array(e.scale, dtype=np.float32),
                      "zero_point": np.array(e.zero_point, dtype=np.uint16 if e.bits == 16 else np.uint8)}]
                 for n, e in io.items() if n in names}
    if precision == "w4a16":
        from onnx import version_converter

        from qnnrt.convert import weights4
        # blocked Q/DQ are opset 21's (ONNX domain): converted first, the quantizer writes no contrib Q/DQ
        model = version_converter.convert_version(model, 21)
        floats = weights4.matmul_weights(model)
        overrides.update(weights4.unblocked_overrides(model))
        config = get_qnn_qdq_config(model, Reader(), activation_type=QuantType.QUInt16,
                                    weight_type=QuantType.QInt4, weight_symmetric=True, init_overrides=overrides)
        config.extra_options["BlockSize"] = weights4.BLOCK
    else:
        config = get_qnn_qdq_config(model, Reader(), activation_type=QuantType.QUInt16,
                                    weight_type=QuantType.QUInt8, init_overrides=overrides)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        quantize(model, f"{tmp}/q.onnx", config)
        out = onnx.load(f"{tmp}/q.onnx")
    if precision == "w4a16":
        weights4.refine_blocks(out, floats)
    return quantized_io(out, {n: e for n, e in io.items() if n in names})


def _rename_uses(graph: onnx.GraphProto, old: str, new: str, skip: onnx.NodeProto) -> None:
    for n in graph.node:
        if n is not skip:
            n.input[:] = [new if t == old else t for t in n.input]
            n.output[:] = [new if t == old else t for t in n.output]


def quantized_io(model: onnx.ModelProto, io: dict[str, Encoding]) -> onnx.ModelProto:
    """Graph inputs feeding a QuantizeLinear and outputs made by a DequantizeLinear become the
    quantized tensors themselves: the QNN graph's I/O are then fixed point with these encodings."""
    g = model.graph
    elem = {16: TensorProto.UINT16, 8: TensorProto.UINT8}
    drop: list[onnx.NodeProto] = []
    for vi in (v for v in g.input if v.name in io):
        users = [n for n in g.node if vi.name in n.input]
        if len(users) != 1 or users[0].op_type != "QuantizeLinear":
            raise BuildError(f"quantized graph {g.name}: input {vi.name} does not feed one QuantizeLinear")
        _rename_uses(g, users[0].output[0], vi.name, users[0])
        vi.type.tensor_type.elem_type = elem[io[vi.name].bits]
        drop.append(users[0])
    for vi in (v for v in g.output if v.name in io):
        dq = next(n for n in g.node if vi.name in n.output)
        if dq.op_type != "DequantizeLinear":
            raise BuildError(f"quantized graph {g.name}: output {vi.name} is not made by a DequantizeLinear")
        _rename_uses(g, dq.input[0], vi.name, dq)
        vi.type.tensor_type.elem_type = elem[io[vi.name].bits]
        drop.append(dq)
    for n in drop:
        g.node.remove(n)
    return model


def calibration_prompts(src: Source, options: ConvertOptions, context: int) -> list[list[int]]:
    """The calibration text as prompts of at most half the context."""
    from tokenizers import Tokenizer
    text = Path(options.calibration).read_text(encoding="utf-8") if options.calibration else DEFAULT_TEXT
    ids = Tokenizer.from_str(src.tokenizer.tokenizer_json or "").encode(text).ids
    if not ids:
        raise BuildError(f"--calibration {options.calibration}: the text has no tokens")
    n = max(8, context // 2)
    return [ids[i:i + n] for i in range(0, min(len(ids), 4 * n), n)]


def quantized_models(src: Source, plan: PartPlan, options: ConvertOptions, ar: int, steps: Steps, work: Path):
    """``models_of(part, ar)`` over the quantized graphs, calibrated once here."""
    floats: dict[tuple[int, int], bytes] = {}

    def float_model(part: int, a: int) -> bytes:
        if (part, a) not in floats:
            floats[(part, a)] = part_model(src.spec, plan, src.weights, a, part).SerializeToString()
        return floats[(part, a)]

    record: dict = {}
    enc: dict[str, Encoding] = {}

    def calibrate() -> None:      # once, and only when a part is not in the cache
        call = cpu_caller(float_model, record)
        for prompt in calibration_prompts(src, options, plan.context):
            run_parts(src.spec, plan, call, prompt, 8, ar)
            for fs in record.get("feeds", {}).values():
                del fs[FEEDS_PER_GRAPH:]
        enc.update(encodings(record["ranges"]))
        steps.done(f"calibrated on {sum(len(f) for f in record['feeds'].values())} graph calls")

    cache: dict[tuple[int, int], onnx.ModelProto] = {}

    def models_of(part: int, a: int, store: object = None) -> onnx.ModelProto:
        """The quantized graph (``store`` unused: ORT's quantizer writes the weights into the model)."""
        if not enc:
            calibrate()
        if (part, a) not in cache:
            cache[(part, a)] = quantize_part(onnx.load_from_string(float_model(part, a)),
                                             record["feeds"][(part, a)], enc, work, options.precision)
        return cache[(part, a)]
    return models_of
