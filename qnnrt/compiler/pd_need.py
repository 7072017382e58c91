"""The PD need of a binary just compiled, predicted from its bytes (core/pd_need.py): what the
converter sizes its parts by, without creating a context."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompiledNeed:
    """A compiled context's predicted PD bytes (None: the binary does not say; ``notes`` say why)
    and its largest graph's."""
    total: int | None
    largest_graph: int | None
    notes: tuple[str, ...] = ()


def predicted_need(blob: bytes | bytearray | memoryview, name: str) -> CompiledNeed:
    """Predicted PD reservation of the context binary ``blob`` (named ``name`` in errors)."""
    from qnnrt.core.binary import ContextBinary
    with ContextBinary(buffer=blob, name=name) as b:
        need = b.pd_need()
        return CompiledNeed(need.total, need.largest_graph, need.notes)
