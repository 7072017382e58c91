"""ONNX Runtime CPU segments as plan steps: bound once over planned buffers (IOBinding), and, when
bound and light enough to send, portable to the PD worker whose graphs run around them."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from qnnrt.core.tensor import address_of
from qnnrt.runtime.cpu_segment import CpuSegment

if TYPE_CHECKING:
    from qnnrt.runtime.plan import MethodPlan

Shape = tuple[int, ...]
Kind = tuple[np.dtype, Shape]   # what a slot is known to hold

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16,
              "tensor(double)": np.float64, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
              "tensor(int16)": np.int16, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
              "tensor(uint16)": np.uint16, "tensor(bool)": np.bool_}


def static_shape(shape: Sequence[object]) -> bool:
    return all(isinstance(d, int) and d >= 0 for d in shape)


class OrtStep:
    """A CPU segment on an IOBinding made once over planned buffers (or session.run when its types
    or shapes are not static)."""

    def __init__(self, plan: MethodPlan, seg: CpuSegment) -> None:
        self.seg = seg
        self.label = segment_label(seg.node_names)   # what a trace calls it
        self.in_slots = [plan.slot(n) for n in seg.feed_names]
        self.out_slots = [plan.slot(n) for n in seg.outputs]
        self.copy_in: list[tuple[np.ndarray, int]] = []
        self.copy_out: list[tuple[np.ndarray, int]] = []
        self.bound = self._bind(plan)
        if not self.bound:  # session.run: what comes out is checked where it is used
            for slot in self.out_slots:
                plan.kinds.pop(slot, None)

    def _output_kinds(self) -> list[Kind] | None:
        from onnx import helper
        outs = []
        for name in self.seg.outputs:
            t = self.seg.output_types.get(name)
            if t is None or t[1] is None or not static_shape(t[1]):
                return None
            try:
                odt = np.dtype(helper.tensor_dtype_to_np_dtype(t[0]))
            except (KeyError, TypeError, ValueError):
                return None
            outs.append((odt, tuple(int(d) for d in t[1] if isinstance(d, int))))
        return outs

    def _bind(self, plan: MethodPlan) -> bool:
        seg, sess = self.seg, self.seg.session
        ins = {i.name: i for i in sess.get_inputs()}
        in_kinds = []
        for name, slot in zip(seg.feed_names, self.in_slots):
            ort_t = _ORT_TYPES.get(ins[name].type)
            kind = plan.kinds.get(slot)
            if ort_t is None or kind is None or kind[0] != np.dtype(ort_t) or not static_shape(kind[1]):
                return False
            in_kinds.append(kind)
        out_kinds = self._output_kinds()
        if out_kinds is None:
            return False
        self.bound_inputs: list[tuple[str, np.ndarray]] = []
        self.bound_outputs: list[tuple[str, np.ndarray]] = []
        for name, slot, (idt, ishape) in zip(seg.feed_names, self.in_slots, in_kinds):
            b = plan.planned.get(slot)
            if b is None:  # a method input / fresh array: copied into a staging buffer
                b = np.zeros(ishape, idt)
                self.copy_in.append((b, slot))
            self.bound_inputs.append((name, b))
        for name, slot, (dt, shape) in zip(seg.outputs, self.out_slots, out_kinds):
            if slot in plan.out_slots:
                b = np.zeros(shape, dt)
                self.copy_out.append((b, slot))
            else:
                b = plan.plan_buffer(slot, shape, dt)
            self.bound_outputs.append((name, b))
            plan.kinds[slot] = (dt, shape)
        self.open_binding(sess)
        return True

    @classmethod
    def bound_over(cls, session: Any, in_slots: list[int], out_slots: list[int],
                   copy_in: list[tuple[np.ndarray, int]], copy_out: list[tuple[np.ndarray, int]],
                   inputs: list[tuple[str, np.ndarray]], outputs: list[tuple[str, np.ndarray]],
                   label: str) -> OrtStep:
        """The same bound step over `session` (a PD worker rebuilding one sent to it)."""
        step = cls.__new__(cls)
        step.label = label
        step.in_slots, step.out_slots, step.copy_in, step.copy_out = in_slots, out_slots, copy_in, copy_out
        step.bound_inputs, step.bound_outputs, step.bound = inputs, outputs, True
        step.open_binding(session)
        return step

    def open_binding(self, sess: Any) -> None:
        """The IO binding over the bound buffers, made once."""
        io = sess.io_binding()
        for name, b in self.bound_inputs:
            io.bind_input(name, "cpu", 0, b.dtype, list(b.shape), address_of(b))
        for name, b in self.bound_outputs:
            io.bind_output(name, "cpu", 0, b.dtype, list(b.shape), address_of(b))
        self._io = io
        # ONNX Runtime's public entry, without RunOptions: given any, it looks up a run config key
        # that is not set, and the RuntimeError it catches costs ~100x the run (bench/RESULTS.md)
        self._run = sess.run_with_iobinding

    def run(self, values: list) -> float:
        if not self.bound:
            res = self.seg.session.run(self.seg.outputs, {
                n: values[s] for n, s in zip(self.seg.feed_names, self.in_slots)})
            for s, r in zip(self.out_slots, res):
                values[s] = r
            return 0.0
        for b, slot in self.copy_in:
            np.copyto(b, values[slot])
        self._run(self._io)
        for b, slot in self.copy_out:
            values[slot] = b.copy()
        return 0.0


class PortableOrtStep:
    """A bound CPU segment a PD worker can run (runtime/segments.py): it says which slots it reads
    and writes, and travels as its model's bytes and bound buffers (planned arena buffers by
    reference), from which the worker opens the same session and binding."""
    __slots__ = ("step", "model")

    def __init__(self, step: OrtStep, model: bytes) -> None:
        self.step, self.model = step, model

    @property
    def reads(self) -> list[int]:
        return self.step.in_slots

    @property
    def writes(self) -> list[int]:
        return self.step.out_slots

    @property
    def label(self) -> str:
        return self.step.label

    def run(self, values: list) -> float:
        return self.step.run(values)



def segment_label(nodes: Sequence[str]) -> str:
    """A CPU segment's name in a trace: ONNX Runtime and its first nodes."""
    shown = ", ".join(nodes[:3]) + (f" +{len(nodes) - 3}" if len(nodes) > 3 else "")
    return f"ONNX Runtime: {shown}"


def ort_step(plan: MethodPlan, seg: CpuSegment) -> OrtStep | PortableOrtStep:
    """A CPU segment's step: portable to a PD worker when bound and its model was kept."""
    step = OrtStep(plan, seg)
    return PortableOrtStep(step, seg.model_bytes) if step.bound and seg.model_bytes is not None else step
