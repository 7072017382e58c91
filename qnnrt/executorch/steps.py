"""The steps a .pte method's plan is made of (lowering.py makes them, runtime/plan.py runs them),
one per instruction: `KernelStep` (a CPU kernel), `MatmulStep` (`aten::mm.out` by a constant float32
weight, into a planned buffer), `ConvertStep` (a delegate's outputs cast or reshaped to what the
program declares), `MoveStep` and `FreeStep` (ExecuTorch's MoveCall / FreeCall), and `Size1Input`, a
delegate input adapter. Arguments are `Slot` (a value made at run time) or `Const` (a program-given
value, put in a slot of its own at plan time), so a step reads only `values[slot]`. A PD worker
rebuilds them from their descriptors (portable.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from qnnrt.core.tensor import TensorSpec, prepare_input
from qnnrt.errors import QnnrtError
from qnnrt.executorch import kernels as K
from qnnrt.executorch.delegates import size1_reshape
from qnnrt.executorch.analysis import shape_fits
from qnnrt.executorch.kernels.dtypes import astype
from qnnrt.executorch.reader import (TensorInfo)
from qnnrt.runtime.steps import Bookkeeping, GraphStep

if TYPE_CHECKING:
    pass


Kind = tuple[np.dtype, tuple[int, ...]]   # what a buffer holds: dtype and shape
F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class Slot:
    """An argument made at run time: the value in this slot."""
    index: int


@dataclass(frozen=True)
class Const:
    """An argument the program gives (a scalar, a list, a constant tensor)."""
    value: object


Arg = Slot | Const


# ------------------------------------------------------------------------------------- the steps
class KernelStep:
    """A CPU kernel: result = kernel(*values[inputs]), cast to the out tensor, in every out slot."""
    __slots__ = ("fn", "inputs", "outs", "info", "tensor", "name", "cast", "where")

    def __init__(self, kernel: K.KernelDef, inputs: list[int], outs: list[int], tensor: TensorInfo,
                 where: str) -> None:
        self.fn, self.name, self.cast = kernel.fn, kernel.name, kernel.cast
        self.inputs, self.outs, self.tensor, self.where = inputs, outs, tensor, where
        self.info = K.OutInfo(tensor.dtype, tensor.shape)

    @property
    def reads(self) -> list[int]:
        return self.inputs

    @property
    def writes(self) -> list[int]:
        return self.outs

    @property
    def label(self) -> str:
        """What a trace calls it: the operator."""
        return self.name

    def run(self, values: list) -> float:
        xs = [values[i] for i in self.inputs]
        try:
            res = K.cast_to_out(self.fn(*xs, out=self.info), self.info, self.name, self.cast)
        except K.KernelError as e:
            raise K.KernelError(f"{self.where}: {e}") from None
        except QnnrtError:
            raise
        except Exception as e:  # noqa: BLE001 - as the interpreter: bad arguments
            raise K.KernelError(f"{self.where}: the program gives this operator arguments it "
                                f"cannot take ({type(e).__name__}: {e})") from None
        if not shape_fits(res.shape, self.tensor):
            raise QnnrtError(f"{self.where}: the result has shape {list(res.shape)} but the "
                             f"program's out tensor is {list(self.tensor.shape)}")
        for o in self.outs:
            values[o] = res
        return 0.0


class MatmulStep:
    """aten::mm.out by a constant float32 weight: values[a].dot(weight, out=result), the result a
    planned buffer (`result`) when it never leaves the method, else a fresh array. For 2-d float32
    arrays ndarray.dot makes the BLAS call np.matmul makes (gemv / gemm with the same arguments,
    so the same bits: tests/executorch/test_plan.py), without a generalized ufunc's set-up per
    call (a third of the cost of np.matmul here)."""
    __slots__ = ("a", "weight", "out", "shape", "result")

    def __init__(self, a: int, weight: np.ndarray, out: int, shape: tuple[int, ...]) -> None:
        self.a, self.weight, self.out, self.shape = a, weight, out, shape
        self.result: np.ndarray | None = None

    @property
    def reads(self) -> list[int]:
        return [self.a]

    @property
    def writes(self) -> list[int]:
        return [self.out]

    @property
    def label(self) -> str:
        return "aten::mm.out"

    def run(self, values: list) -> float:
        res = self.result
        if res is None:
            res = np.empty(self.shape, np.float32)
        values[self.a].dot(self.weight, res)   # (b, out): positional, parsed fastest
        values[self.out] = res
        return 0.0


@dataclass(frozen=True)
class OutputConversion:
    """A graph output whose dtype or shape is not the one the program declares for its value."""
    slot: int
    output: int            # the graph's output position
    tensor: TensorInfo     # what the program declares


class ConvertStep(Bookkeeping):
    """After a delegate call, the outputs the program declares otherwise converted (dtype cast,
    reshape of the same size), in their slots."""
    __slots__ = ("graph", "conversions", "where")

    def __init__(self, graph: str, conversions: list[OutputConversion], where: str) -> None:
        self.graph, self.conversions, self.where = graph, conversions, where

    @property
    def reads(self) -> list[int]:
        return [c.slot for c in self.conversions]

    @property
    def writes(self) -> list[int]:
        return [c.slot for c in self.conversions]

    def run(self, values: list) -> float:
        for c in self.conversions:
            a, t = values[c.slot], c.tensor
            if t.dtype is not None and a.dtype != t.dtype:
                a = astype(a, t.dtype)
            if a.shape != tuple(t.shape):
                if a.size != t.numel:
                    raise QnnrtError(f"{self.where}: output {c.output} of graph {self.graph!r} has "
                                     f"shape {list(a.shape)}, the program expects {list(t.shape)}")
                a = a.reshape(t.shape)
            values[c.slot] = a
        return 0.0


class MoveStep(Bookkeeping):
    """ExecuTorch's MoveCall: the value in `source` is also the value in `target`."""
    __slots__ = ("source", "target")

    def __init__(self, source: int, target: int) -> None:
        self.source, self.target = source, target

    @property
    def reads(self) -> list[int]:
        return [self.source]

    @property
    def writes(self) -> list[int]:
        return [self.target]

    def run(self, values: list) -> float:
        values[self.target] = values[self.source]
        return 0.0


class FreeStep(Bookkeeping):
    """ExecuTorch's FreeCall, or a value dead after its last use: the slot lets go of it."""
    __slots__ = ("slot",)

    def __init__(self, slot: int) -> None:
        self.slot = slot

    @property
    def reads(self) -> list[int]:
        return []

    @property
    def writes(self) -> list[int]:
        return [self.slot]

    def run(self, values: list) -> float:
        values[self.slot] = None
        return 0.0


@dataclass(frozen=True)
class Size1Input:
    """A delegate input that is not already right: size-1 dims reshaped as ExecuTorch accepts, then
    checked and converted like any graph input (a value: a PD worker may run the delegate)."""
    spec: TensorSpec
    where: str

    def __call__(self, a: np.ndarray) -> np.ndarray:
        return prepare_input(self.spec, size1_reshape(a, tuple(self.spec.shape)), self.where)


def adapt_delegate_inputs(step: GraphStep) -> None:
    b = step.binding
    for i, s in enumerate(b.spec.inputs):
        b.adapt_input(i, Size1Input(s, b.where))
