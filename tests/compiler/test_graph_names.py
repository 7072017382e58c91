"""Renaming graphs and tensors in place inside a real context binary (qnnrt/compiler/graph_names.py)."""
from __future__ import annotations

import pytest

from qnnrt.compiler.graph_names import rename_graph, rename_in_binary
from qnnrt.core.binary import ContextBinary
from qnnrt.errors import BuildError
from tests.helpers.data import GENIE_F32

BIN = GENIE_F32 / "tiny_llama_part_4_of_4.bin"     # graphs prompt_ar16_cl128_4_of_4, token_ar1_cl128_4_of_4


def _graphs(blob: bytes) -> dict[str, list[str]]:
    with ContextBinary(buffer=blob) as b:
        return {g.name: [t.name for t in g.inputs + g.outputs] for g in b.graphs}


def test_renamed_graphs_and_tensors_are_what_qnn_reads() -> None:
    blob = BIN.read_bytes()
    out = rename_in_binary(blob, {"token_ar1_cl128_4_of_4": "token_4"},
                           {"_model_model_layers_3_Add_1_output_0": "hidden"})
    assert len(out) == len(blob)
    assert b"token_ar1_cl128_4_of_4" not in out     # nor in the HTP blob's PICKLE/<graph id>/ copy
    assert _graphs(out) == {"prompt_ar16_cl128_4_of_4": ["hidden", "logits"], "token_4": ["hidden", "logits"]}
    assert _graphs(rename_graph(blob, "prompt_ar16_cl128_4_of_4", "p"))["p"] == \
        ["_model_model_layers_3_Add_1_output_0", "logits"]


def test_a_longer_or_unknown_name_is_refused() -> None:
    blob = BIN.read_bytes()
    with pytest.raises(BuildError, match="at most 24 bytes"):
        rename_graph(blob, "prompt_ar16_cl128_4_of_4", "prompt_ar16_cl128_4_of_4_x")
    with pytest.raises(BuildError, match="is not named in this context binary"):
        rename_graph(blob, "no_such_graph", "x")
