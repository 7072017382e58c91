"""The ExecuTorch instruction kinds, defined once for everything that switches over them.

`KINDS` maps each instruction class of a .pte chain to its `InstructionKind`: what describe_pte
counts it as, what a trace calls it, where it may jump, and which handler of an
`InstructionVisitor` takes it. The interpreter (its execution and its load-time analyses), the
planner's lowering and describe read this table instead of writing their own isinstance chains,
so a new kind is one entry here and one abstract method on `InstructionVisitor`, which every
visitor then has to implement before it can be instantiated.

Handlers are resolved per visitor *class* (`InstructionKind.handler`), so a caller can look them
up once per method at load time and call plain functions per instruction.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from qnnrt.errors import FormatError
from qnnrt.executorch.pte_model import (DelegateCall, FreeCall, Instruction, JumpFalseCall, KernelCall,
                                        MoveCall, PteMethod)

__all__ = ["InstructionVisitor", "InstructionKind", "KINDS", "kind_of", "visit", "handlers"]

T = TypeVar("T")
Handler = Callable[[Any, int, Any], Any]   # (visitor, instruction index, instruction) -> result


class InstructionVisitor(ABC, Generic[T]):
    """One handler per instruction kind (`pc` is the instruction's index in its chain)."""

    @abstractmethod
    def kernel(self, pc: int, ins: KernelCall) -> T: ...

    @abstractmethod
    def delegate(self, pc: int, ins: DelegateCall) -> T: ...

    @abstractmethod
    def move(self, pc: int, ins: MoveCall) -> T: ...

    @abstractmethod
    def jump_false(self, pc: int, ins: JumpFalseCall) -> T: ...

    @abstractmethod
    def free(self, pc: int, ins: FreeCall) -> T: ...


@dataclass(frozen=True)
class InstructionKind:
    """What the interpreter, the planner and describe need to know about one kind."""
    trace_kind: str                                      # a trace entry's "kind"
    counter: str                                         # describe_pte's instruction count key
    handler: Callable[[type[InstructionVisitor[Any]]], Handler]   # the visitor class's function
    label: Callable[[PteMethod, Any], str]               # a trace entry's "name"
    jump_target: Callable[[Any], int | None]             # the instruction it may jump to, or None


def _no_jump(ins: object) -> None:
    return None


KINDS: Mapping[type, InstructionKind] = {
    KernelCall: InstructionKind(
        "kernel", "kernel_calls", lambda v: v.kernel,
        lambda m, ins: m.operators[ins.op_index].qualified_name, _no_jump),
    DelegateCall: InstructionKind(
        "delegate", "delegate_calls", lambda v: v.delegate,
        lambda m, ins: f"delegate {ins.delegate_index}", _no_jump),
    MoveCall: InstructionKind("move", "moves", lambda v: v.move, lambda m, ins: "move", _no_jump),
    JumpFalseCall: InstructionKind(
        "jump", "jumps", lambda v: v.jump_false, lambda m, ins: "jump_false",
        lambda ins: ins.destination_instruction),
    FreeCall: InstructionKind("free", "frees", lambda v: v.free, lambda m, ins: "free", _no_jump),
}


def kind_of(ins: Instruction) -> InstructionKind:
    """The table's entry for `ins`; a clear error for an object that is no instruction."""
    kind = KINDS.get(type(ins))
    if kind is None:
        raise FormatError(f"{ins!r} is not an ExecuTorch instruction qnnrt knows "
                          f"({', '.join(c.__name__ for c in KINDS)}); the reader made something else")
    return kind


def visit(visitor: InstructionVisitor[T], pc: int, ins: Instruction) -> T:
    """`visitor`'s handler for the kind of `ins`, called (for load-time passes)."""
    result: T = kind_of(ins).handler(type(visitor))(visitor, pc, ins)
    return result


def handlers(visitor_class: type[InstructionVisitor[Any]],
             instructions: Iterable[Instruction]) -> list[Handler]:
    """Each instruction's handler in `visitor_class` (plain functions taking the visitor first):
    looked up once, so a run calls them without a dispatch per instruction."""
    return [kind_of(ins).handler(visitor_class) for ins in instructions]
