"""The .pte plan's CPU steps as descriptors a PD worker rebuilds (runtime/hosts/pd/portable.py): a kernel by
its registered name, a matmul by its weight (by value) and result buffer (in the arena), the output
conversions, moves and frees by their slots; and the delegate input adapter that reshapes size-1
dims. Imported by executorch/program.py, so every process that builds .pte plans has them; a PD
worker imports it by the descriptors' registered names."""
from __future__ import annotations

from dataclasses import dataclass

from qnnrt.executorch import kernels as K
from qnnrt.executorch.steps import (ConvertStep, FreeStep, KernelStep, MatmulStep, MoveStep,
                                    OutputConversion, Size1Input)
from qnnrt.executorch.reader import TensorInfo
from qnnrt.runtime.hosts.pd.portable import ArrayRef, Refs, Resolver, register, register_adapter


@dataclass(frozen=True)
class KernelDescriptor:
    kernel: str                # its name in the kernel registry
    inputs: tuple[int, ...]
    outs: tuple[int, ...]
    tensor: TensorInfo
    where: str


@dataclass(frozen=True)
class MatmulDescriptor:
    a: int
    weight: ArrayRef
    out: int
    shape: tuple[int, ...]
    result: ArrayRef | None


@dataclass(frozen=True)
class ConvertDescriptor:
    graph: str
    conversions: tuple[OutputConversion, ...]
    where: str


@dataclass(frozen=True)
class MoveDescriptor:
    source: int
    target: int


@dataclass(frozen=True)
class FreeDescriptor:
    slot: int


def _kernel(s: KernelStep, refs: Refs) -> KernelDescriptor:
    return KernelDescriptor(s.name, tuple(s.inputs), tuple(s.outs), s.tensor, s.where)


def _matmul(s: MatmulStep, refs: Refs) -> MatmulDescriptor:
    return MatmulDescriptor(s.a, refs.array(s.weight), s.out, tuple(s.shape),
                            None if s.result is None else refs.array(s.result))


def _rebuild_matmul(d: MatmulDescriptor, r: Resolver) -> MatmulStep:
    step = MatmulStep(d.a, r.array(d.weight), d.out, d.shape)
    step.result = None if d.result is None else r.array(d.result)
    return step


register(KernelStep, KernelDescriptor, _kernel,
         lambda d, r: KernelStep(K.get_kernel(d.kernel), list(d.inputs), list(d.outs), d.tensor,
                                 d.where))
register(MatmulStep, MatmulDescriptor, _matmul, _rebuild_matmul)
register(ConvertStep, ConvertDescriptor,
         lambda s, refs: ConvertDescriptor(s.graph, tuple(s.conversions), s.where),
         lambda d, r: ConvertStep(d.graph, list(d.conversions), d.where))
register(MoveStep, MoveDescriptor, lambda s, refs: MoveDescriptor(s.source, s.target),
         lambda d, r: MoveStep(d.source, d.target))
register(FreeStep, FreeDescriptor, lambda s, refs: FreeDescriptor(s.slot),
         lambda d, r: FreeStep(d.slot))
register_adapter(Size1Input, __name__)
