"""The one teardown order of a process that holds contexts."""
from __future__ import annotations

import pytest


def test_teardown_closes_everything_in_order_even_after_a_failure():
    """runtime/teardown.py: pool, what lives on the backend, binaries, owned files, backend, then
    the heap's last mark; a step that fails does not keep the rest open, and its error is raised."""
    from qnnrt.runtime.teardown import Holdings, close_all
    done: list[str] = []

    class Thing:
        def __init__(self, name: str, fail: bool = False) -> None:
            self.name, self.fail = name, fail

        def close(self) -> None:
            done.append(self.name)
            if self.fail:
                raise RuntimeError(f"{self.name} would not close")

    class Heap(Thing):
        def mark(self, event: str) -> None:
            done.append(event)

    h = Holdings(Thing("pool", fail=True), [Thing("shared")], [Thing("b1"), Thing("b2")],
                 [Thing("pte")], Thing("backend"), Heap("heap"))
    with pytest.raises(RuntimeError, match="pool would not close"):
        close_all(h)
    assert done == ["pool", "shared", "b1", "b2", "pte", "backend", "backend_freed", "heap"]
