"""A run of consecutive CPU nodes of a method, executed by one ONNX Runtime CPU session (built once,
weights loaded once)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from qnnrt.errors import FormatError
from qnnrt.formats.onnx_graph import Dims, node_reads, tensor_type

if TYPE_CHECKING:
    import onnxruntime as ort


def _session_options() -> "ort.SessionOptions":
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1  # segments are small; thread hand-offs cost more than they save
    so.inter_op_num_threads = 1
    return so


PORTABLE_MODEL_BYTES = 64 << 20


def open_session(model_bytes: bytes) -> "ort.InferenceSession":
    import onnxruntime as ort
    return ort.InferenceSession(model_bytes, _session_options(), providers=["CPUExecutionProvider"])


class CpuSegment:
    """`nodes` of `graph` run on the CPU; `inputs` come from earlier steps, `outputs` are needed later.

    `types` maps tensor names to (onnx elem type, shape) for the segment's inputs; the sub-model is
    shape-inferred so later segments learn the types of this one's outputs.
    """

    def __init__(self, name: str, graph: onnx.GraphProto, nodes: list[onnx.NodeProto],
                 inputs: list[str], outputs: list[str], types: dict[str, tuple[int, Dims | None]],
                 opsets: Iterable[onnx.OperatorSetIdProto], ir_version: int, where: str) -> None:
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.node_names = [n.name or n.op_type for n in nodes]
        used = {t for n in nodes for t in node_reads(n)}
        inits = [t for t in graph.initializer if t.name in used]
        init_names = {t.name for t in inits}
        missing = [i for i in inputs if i not in types]
        if missing:
            raise FormatError(f"{where}: cannot tell the type of tensor(s) {missing} feeding CPU "
                              f"nodes {self.node_names[:5]}; add value_info for them")
        vin = [helper.make_tensor_value_info(i, types[i][0], types[i][1]) for i in inputs
               if i not in init_names]
        vout = [helper.make_tensor_value_info(o, types[o][0], types[o][1]) if o in types
                else helper.make_empty_tensor_value_info(o) for o in outputs]
        g = helper.make_graph(nodes, name, vin, vout, inits,
                              value_info=[v for v in graph.value_info if v.name in used])
        model = helper.make_model(g, opset_imports=list(opsets))
        model.ir_version = ir_version
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
        except Exception:  # noqa: BLE001 - inference only refines output types; any failure keeps the declared ones
            inferred = model
        self.output_types: dict[str, tuple[int, Dims | None]] = {}
        for vi in list(inferred.graph.output) + list(inferred.graph.value_info):
            t = tensor_type(vi.type)
            if vi.name in outputs and t is not None:
                self.output_types[vi.name] = t
        data = model.SerializeToString()
        # kept to build the same session in a PD worker that runs this segment (runtime/plan.py
        # OrtStep); a segment heavier than that stays in this process
        self.model_bytes: bytes | None = data if len(data) <= PORTABLE_MODEL_BYTES else None
        try:
            self.session = open_session(data)
        except Exception as e:
            raise FormatError(f"{where}: ONNX Runtime cannot build the CPU segment "
                              f"{self.node_names[:5]}...: {e}") from e
        # what the session is fed: `inputs` less those the sub-model holds as initializers
        self.feed_names: list[str] = [i.name for i in self.session.get_inputs()]

    def run(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = {k: values[k] for k in self.feed_names}
        res = self.session.run(self.outputs, feeds)
        return dict(zip(self.outputs, res))
