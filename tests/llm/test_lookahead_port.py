"""tools/fixtures/et_lookahead_trace.py, the Python port of ExecuTorch's lookahead runner that wrote the traces
test_lookahead.py holds qnnrt to, and qnnrt's own lookahead pieces agree where both follow the runner: glibc's
rand(), the lookahead step's attention tree and the n-gram pool (numpy only: the port's ExecuTorch parts are
not imported)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from qnnrt.llm.lookahead import CRand, LookaheadParams, NgramPool, StepLayout

PORT = Path(__file__).resolve().parents[2] / "tools" / "fixtures" / "et_lookahead_trace.py"
_spec = importlib.util.spec_from_file_location("et_lookahead_trace", PORT)
assert _spec is not None and _spec.loader is not None
port = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = port                 # its dataclasses look their module up
_spec.loader.exec_module(port)


def test_the_ports_rand_is_qnnrts():
    a, b = port.GlibcRand(), CRand()
    assert [a() for _ in range(2000)] == [b() for _ in range(2000)]


def test_the_ports_step_mask_is_qnnrts_tree_over_the_cache():
    kv = port.KVManager(n_layers=1, n_heads=1, head_dim=2, context_len=16)
    mask = kv.init_mask(port.attention_map(3, 2, 2), 8, n_past=5) == port.MASK_OPEN
    tree = StepLayout(LookaheadParams(3, 2, 2), 8).tree
    assert np.array_equal(mask[:, 16 - 8:], tree.visible)
    assert mask[:, :5].all() and not mask[:, 5:8].any()
    kv.update_mask(mask_f := kv.init_mask(port.attention_map(3, 2, 2), 8, 5), 5, 3)
    assert (mask_f[:, :8] == port.MASK_OPEN).all()


def test_the_ports_pool_keeps_what_qnnrts_keeps_in_the_same_order():
    ours, theirs = NgramPool(2), port.NgramPool(vocab=16, ngram=3, gcap=2)
    for first, ngram in [(7, (1, 2)), (7, (1, 2)), (7, (3, 4)), (7, (5, 6)), (3, (7, 7))]:
        ours.add(first, ngram)
        theirs.add(first, list(ngram))
    for first in (7, 3, 8):
        assert [tuple(g) for g in theirs.guesses(first)] == ours.guesses(first)
