"""What the interpreter (interpreter.py) works out about a method at load time, and the plans
(lowering.py) read: `MethodAnalysis` (the values the program gives, which tensors are dynamic,
mutable state), `shape_fits`, the operator check, and the instruction visitors that list an
instruction's value references and split a delegate's arguments."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence


from qnnrt.errors import FormatError
from qnnrt.executorch.instructions import InstructionVisitor
from qnnrt.executorch.reader import (DelegateCall, FreeCall, JumpFalseCall, KernelCall, MoveCall,
                               Instruction, PteMethod, PteValue, TensorInfo)
from qnnrt.executorch import kernels as K



class _Undefined:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<undefined>"


_UNDEF = _Undefined()
UNDEFINED = _UNDEF  # MethodAnalysis.static's mark for a value only an instruction or input defines


@dataclass(frozen=True)
class MethodAnalysis:
    """What the interpreter decides about a method at load, for planners that compile it
    (executorch/plan.py): read-only, indexed like the program's values and instructions."""
    name: str
    instructions: tuple[Instruction, ...]
    values: tuple[PteValue, ...]
    static: tuple[Any, ...]                    # program-given value, or UNDEFINED
    kernels: Mapping[int, K.KernelDef]         # instruction index -> kernel of a KernelCall
    delegate_inputs: Mapping[int, int]         # instruction index -> inputs of a DelegateCall
    free_after: Mapping[int, tuple[int, ...]]  # instruction index -> values dead after it
    input_values: tuple[int, ...]
    output_values: tuple[int, ...]
    constant_values: frozenset[int]            # tensors stored in the program (never written)
    has_mutable_state: bool                    # values the program updates in place across runs


def shape_fits(shape: Sequence[int], t: TensorInfo) -> bool:
    """Does an array of `shape` fit tensor `t` (equal when static, within bounds when bounded)?"""
    shape = tuple(int(s) for s in shape)
    if t.shape_dynamism == 0:
        return shape == t.shape
    if t.shape_dynamism == 1:
        return len(shape) == len(t.shape) and all(a <= b for a, b in zip(shape, t.shape))
    return True


def check_operators(method: PteMethod) -> None:
    """Raise one FormatError listing every operator of ``method`` that has no CPU kernel."""
    counts: dict[str, int] = {}
    for ins in method.instructions:
        if isinstance(ins, KernelCall):
            n = method.operators[ins.op_index].qualified_name
            counts[n] = counts.get(n, 0) + 1
    missing = K.missing_operators(counts)
    if missing:
        listed = ", ".join(f"{m} ({counts[m]} call{'s' if counts[m] != 1 else ''})" for m in missing)
        raise FormatError(
            f"method {method.name!r} uses {len(missing)} CPU operator(s) that qnnrt does not "
            f"implement: {listed}. Re-export so these run inside the QNN delegate, or add a kernel "
            f"to qnnrt.executorch.kernels. Implemented: {', '.join(K.supported_operators())}.")


class References(InstructionVisitor[list[int]]):
    """The values an instruction names, lists expanded into their items (`refs`), for the
    last-use analysis."""

    def __init__(self, refs: Callable[[int], list[int]]) -> None:
        self.refs = refs

    def _args(self, args: Sequence[int]) -> list[int]:
        out: list[int] = []
        for a in args:
            out.extend(self.refs(a))
        return out

    def kernel(self, pc: int, ins: KernelCall) -> list[int]:
        return self._args(ins.args)

    def delegate(self, pc: int, ins: DelegateCall) -> list[int]:
        return self._args(ins.args)

    def move(self, pc: int, ins: MoveCall) -> list[int]:
        return [*self.refs(ins.move_from), ins.move_to]

    def jump_false(self, pc: int, ins: JumpFalseCall) -> list[int]:
        return [ins.cond_value_index]

    def free(self, pc: int, ins: FreeCall) -> list[int]:
        return [ins.value_index]


class DelegateSplit(InstructionVisitor[None]):
    """Where each DelegateCall's inputs end: the `override` count, else the leading args already
    defined when the call is reached (`defined` grows with every instruction's outputs)."""

    def __init__(self, name: str, kernels: Mapping[int, K.KernelDef], override: Mapping[int, int],
                 defined: set[int]) -> None:
        self.name, self.kernels, self.override, self.defined = name, kernels, override, defined
        self.split: dict[int, int] = {}

    def kernel(self, pc: int, ins: KernelCall) -> None:
        self.defined.update(ins.args[self.kernels[pc].n_inputs:])

    def delegate(self, pc: int, ins: DelegateCall) -> None:
        args, defined = ins.args, self.defined
        if ins.delegate_index in self.override:
            n_in = int(self.override[ins.delegate_index])
            if not 0 <= n_in <= len(args):
                raise FormatError(f"method {self.name!r} instruction {pc}: delegate "
                                  f"{ins.delegate_index} said to take {n_in} inputs but the "
                                  f"call has {len(args)} args")
        else:
            n_in = 0
            while n_in < len(args) and args[n_in] in defined:
                n_in += 1
            late = [a for a in args[n_in:] if a in defined]
            if late:
                raise FormatError(
                    f"method {self.name!r} instruction {pc}: cannot tell the inputs of "
                    f"delegate {ins.delegate_index} from its outputs (args {list(args)}; "
                    f"values {late} are produced earlier but follow an output). Pass "
                    "delegate_num_inputs={delegate: count}.")
        self.split[pc] = n_in
        defined.update(args[n_in:])

    def move(self, pc: int, ins: MoveCall) -> None:
        self.defined.add(ins.move_to)

    def jump_false(self, pc: int, ins: JumpFalseCall) -> None:
        return None

    def free(self, pc: int, ins: FreeCall) -> None:
        return None
