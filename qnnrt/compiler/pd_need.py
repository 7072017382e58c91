"""The PD need of a binary just compiled, predicted from its bytes (core/pd_need.py): what the
converter sizes its parts by, without creating a context."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompiledNeed:
    """A compiled context's predicted PD bytes (None: the binary does not say; ``notes`` say why),
    its largest graph's, and the weights its graphs share (weight-shared binaries; reserved once,
    outside core/pd_need's per-context sum): ``total`` includes them once."""
    total: int | None
    largest_graph: int | None
    shared_weights: int = 0
    notes: tuple[str, ...] = ()


def predicted_need(blob: bytes | bytearray | memoryview, name: str) -> CompiledNeed:
    """Predicted PD reservation of the context binary ``blob`` (named ``name`` in errors)."""
    from qnnrt.core.binary import ContextBinary
    with ContextBinary(buffer=blob, name=name) as b:
        need = b.pd_need()
        shared = max((g.shared_weights_size for g in b.graphs), default=0)
        total = None if need.total is None else need.total + shared
        return CompiledNeed(total, need.largest_graph, shared, need.notes)
