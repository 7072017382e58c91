"""A plan segment's steps travel as descriptors (runtime/hosts/pd/portable.py) and are rebuilt, not pickled:
the rebuilt step computes what the original does, over the same arena memory, and a step or adapter
no kind registered is refused by name."""
from __future__ import annotations

import numpy as np
import pytest

from qnnrt.executorch.steps import FreeStep, MatmulStep, MoveStep
from qnnrt.runtime.hosts.pd import channel as ch
from qnnrt.runtime.hosts.pd.portable import ArenaArray, Refs, Resolver, StepDescriptor, describe, rebuild


def _sides():
    arena = ch.Arena()
    return arena, Refs(arena, lambda call: None), Resolver(ch.ArenaView(), lambda i: None,
                                                           lambda i: None)


def test_a_matmul_is_rebuilt_over_the_same_arena_buffer():
    arena, refs, resolver = _sides()
    weight = np.arange(12, dtype=np.float32).reshape(3, 4)
    result, _ = arena.alloc((1, 4), np.float32)
    step = MatmulStep(0, weight, 1, (1, 4))
    step.result = result
    d = describe(step, refs)
    assert isinstance(d, StepDescriptor) and d.kind.endswith(":MatmulDescriptor")
    back = rebuild(d, resolver)
    assert isinstance(back, MatmulStep) and back is not step
    x = np.ones((1, 3), np.float32)
    values = [x, None]
    back.run(values)
    assert np.array_equal(values[1], x.dot(weight)) and values[1] is back.result
    assert np.array_equal(result, x.dot(weight))   # written where the main process reads it
    assert refs.array(result) == ArenaArray(arena.block_of(result), (1, 4), "<f4")
    assert refs.array(weight) is weight            # not in the arena: by value


def test_moves_and_frees_round_trip():
    _, refs, resolver = _sides()
    values = ["a", None, "c"]
    rebuild(describe(MoveStep(0, 1), refs), resolver).run(values)
    rebuild(describe(FreeStep(2), refs), resolver).run(values)
    assert values == ["a", "a", None]


def test_a_step_no_kind_registered_is_refused():
    _, refs, resolver = _sides()

    class Elsewhere:
        def run(self, values: list) -> float:
            return 0.0
    with pytest.raises(ch.ProtocolError, match="cannot run in another host"):
        describe(Elsewhere(), refs)
    with pytest.raises(ch.ProtocolError, match="does not know"):
        rebuild(StepDescriptor("os:system", b""), resolver)   # never imported: not qnnrt's
