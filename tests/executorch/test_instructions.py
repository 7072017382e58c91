"""The one table of ExecuTorch instruction kinds (qnnrt/executorch/instructions.py): it covers every
kind the reader makes, each visitor handler is one kind's, and the interpreter's trace and
describe_pte's counts come from it."""
import typing

import numpy as np
import pytest

from qnnrt.errors import FormatError
from qnnrt.executorch import schema as S
from qnnrt.executorch.describe import describe_pte
from qnnrt.executorch.instructions import KINDS, InstructionVisitor, handlers, kind_of
from qnnrt.executorch.interpreter import PteMethodRunner
from qnnrt.executorch.pte_model import Instruction
from qnnrt.executorch.reader import read_pte
from tests.helpers.pte_writer import PteBuilder

f32 = np.float32


def test_every_instruction_class_has_one_kind():
    assert set(KINDS) == set(typing.get_args(Instruction))
    members = {k for k, v in vars(S.InstructionArguments).items() if isinstance(v, int) and k != "NONE"}
    assert {c.__name__ for c in KINDS} == members      # each union member of the schema
    assert len({k.counter for k in KINDS.values()}) == len(KINDS)
    assert len({k.trace_kind for k in KINDS.values()}) == len(KINDS)


def test_each_visitor_handler_belongs_to_one_kind():
    abstract = InstructionVisitor.__abstractmethods__
    assert {kind.handler(InstructionVisitor).__name__ for kind in KINDS.values()} == abstract
    assert len(abstract) == len(KINDS)


def test_a_visitor_without_a_handler_cannot_be_made():
    class NoFree(InstructionVisitor[None]):
        def kernel(self, pc, ins): ...
        def delegate(self, pc, ins): ...
        def move(self, pc, ins): ...
        def jump_false(self, pc, ins): ...

    with pytest.raises(TypeError, match="free"):
        NoFree()


def test_something_else_is_a_clear_error():
    with pytest.raises(FormatError, match="not an ExecuTorch instruction"):
        kind_of(("move", 1, 2))  # type: ignore[arg-type]
    with pytest.raises(FormatError):
        handlers(InstructionVisitor, [object()])  # type: ignore[list-item]


def _all_kinds(tmp_path):
    b = PteBuilder()
    m = b.method("forward")
    x, y, z, w = (m.tensor(f32, (3,)) for _ in range(4))
    m.kernel("aten::clone.out", [x, m.null(), y, y])
    m.jump_false(m.bool(False), 3)
    m.kernel("aten::mul.out", [y, y, y, y])
    m.move(y, z)
    m.free(y)
    m.kernel("aten::add.out", [z, z, m.int(1), w, w])
    m.inputs, m.outputs = [x], [w]
    p = tmp_path / "m.pte"
    b.save(p)
    return read_pte(p)


def test_trace_and_counts_name_each_kind(tmp_path):
    prog = _all_kinds(tmp_path)
    trace: list = []
    out = PteMethodRunner(prog.methods["forward"]).run([np.array([1, 2, 3], f32)], trace=trace)
    np.testing.assert_array_equal(out[0], [2, 4, 6])
    assert [(t["index"], t["kind"], t["name"]) for t in trace] == [
        (0, "kernel", "aten::clone.out"), (1, "jump", "jump_false"), (3, "move", "move"),
        (4, "free", "free"), (5, "kernel", "aten::add.out")]
    counts = describe_pte(prog)["methods"][0]["instructions"]
    assert counts == {"total": 6, "kernel_calls": 3, "delegate_calls": 0, "moves": 1, "jumps": 1,
                      "frees": 1}
