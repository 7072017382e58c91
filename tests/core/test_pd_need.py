"""The PD need predicted from a binary equals, byte for byte, what QNN reserves when it creates the
context (the "Setting context N reserved space to S" line), part by part."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from qnnrt.core import Backend, Context, ContextBinary, open_library
from qnnrt.core.pd_need import PARTS, GraphBlobInfo, PickleHeader, need_from_blob_info, pickle_headers
from qnnrt.profiling.pd_log import pd_reserved_from_log
from tests.helpers.data import EXECUTORCH, LLM_STORIES
from tests.helpers.qnn_fixtures import add_relu_mul, compile_models

ROOT = Path(__file__).resolve().parents[1]
_GRAPH = re.compile(r"graph (\S+) estimated PD size ~[\d.]+MB, including nonSharedWeight (\d+) B I/O (\d+) B "
                    r"runlist (\d+) B spillfill (\d+) B")
_VTCM = re.compile(r"graph name:(\S+), hexagon graph id \d+ in graph info: .* vtcm (\d+) ")
_LARGEST = re.compile(r"including largest Graph estimate (\d+) B")


def _pte_fixtures() -> list[Path]:
    return sorted(EXECUTORCH.glob("*/model.pte")) + [LLM_STORIES / "model.pte"]


@pytest.fixture(scope="module")
def verbose_backend():
    with Backend(log_level="verbose") as be:
        yield be


def check_against_qnn(backend: Backend, binary: ContextBinary) -> int:
    need = binary.pd_need()
    assert need.exact and not need.notes, need.notes
    ctx = Context(backend, binary)
    try:
        log = ctx.creation_log
    finally:
        ctx.close()
    assert pd_reserved_from_log(log) == need.total  # the context's reservation, exactly
    largest = [int(m.group(1)) for line in log if (m := _LARGEST.search(line))]
    assert largest[-1] == need.largest_graph
    reported = {}
    for line in log:
        if (m := _GRAPH.search(line)):
            reported.setdefault(m.group(1), {}).update(zip(PARTS[:4], map(int, m.groups()[1:])))
        elif (m := _VTCM.search(line)):
            reported.setdefault(m.group(1), {})["vtcm"] = int(m.group(2))
    for g in need.graphs:  # every part of every graph
        assert reported[g.name] == g.parts, g.name
    return need.total


def test_small_binary(verbose_backend, small_binary):
    with ContextBinary(small_binary.path) as b:
        total = check_against_qnn(verbose_backend, b)
        assert total == 2 * 2**20 + b.pd_need().parts["io"] + b.pd_need().parts["runlist"] + 8 * 2**20


def test_two_graph_context_reserves_the_sum(verbose_backend, two_graph_binary):
    with ContextBinary(two_graph_binary.path) as b:
        need = b.pd_need()
        assert len(need.graphs) == 2 and need.total == sum(g.total for g in need.graphs)
        assert need.total > need.largest_graph
        check_against_qnn(verbose_backend, b)


def test_fixed_point_io(verbose_backend, q8_binary):
    with ContextBinary(q8_binary.path) as b:
        check_against_qnn(verbose_backend, b)


@pytest.mark.slow
def test_large_weights_and_activations(verbose_backend, tmp_path_factory):
    width = 1 << 16  # 64K floats: 256 KiB per float32 I/O tensor (kept small: the compile is slow)
    built = compile_models([add_relu_mul(width=width, name="wide")], ["wide"], tmp_path_factory.mktemp("wide"))
    with ContextBinary(built.path) as b:
        parts = b.pd_need().parts
        assert parts["non_shared_weights"] >= 2 << 20 and parts["non_shared_weights"] % (2 << 20) == 0
        assert parts["io"] >= 2 * width * 4
        check_against_qnn(verbose_backend, b)


@pytest.mark.parametrize("pte", _pte_fixtures(), ids=lambda p: p.parent.name)
def test_executorch_delegates(verbose_backend, pte):
    from qnnrt.executorch.program import pte_methods
    binaries, _, _, prog, _ = pte_methods(pte, open_library())
    try:
        for b in binaries.values():
            check_against_qnn(verbose_backend, b)
    finally:
        for b in binaries.values():
            b.close()
        prog.close()


def test_binary_info_without_blob_info_is_unknown_not_guessed():
    need = need_from_blob_info([GraphBlobInfo("g", graph_info_version=2)], [])
    assert need.total is None and need.largest_graph is None and not need.exact
    assert all(v is None for v in need.parts.values())
    assert "no HTP graph blob info" in need.notes[0] and "'g'" in need.notes[0]
    v1 = {"spillFillBufferSize": 4096}
    need = need_from_blob_info([GraphBlobInfo("g", 3, 40, v1=v1)], [])
    assert need.parts["spill_fill"] == 4096 and need.parts["io"] is None and need.total is None
    assert "no V2 part" in need.notes[0]


def test_blob_info_without_matching_pickle_leaves_runlist_and_vtcm_unknown():
    v1 = {"spillFillBufferSize": 0}
    v2 = {"constSize": 100, "ioTensorSize": 8192, "opDataSize": 512, "ddrTensorSize": 0,
          "sharedWeightsSize": 0}
    other = PickleHeader(0, (0, 32768), (9, 0, 0, 0, 0, 1, 32) + (0,) * 6)
    need = need_from_blob_info([GraphBlobInfo("g", 3, 112, v1, v2)], [other])
    assert need.parts["non_shared_weights"] == 2 << 20 and need.parts["io"] == 8192
    assert need.parts["runlist"] is None and need.parts["vtcm"] is None and need.total is None
    match = PickleHeader(0, (0, 32768), (2, 0, 0, 1, 0, 3, 32) + (0,) * 6)
    v2 = dict(v2, constSize=256)
    need = need_from_blob_info([GraphBlobInfo("g", 3, 112, v1, v2)], [match])
    assert need.parts == {"non_shared_weights": 2 << 20, "io": 8192, "runlist": 512 + 3 * 256,
                          "spill_fill": 0, "vtcm": 32768 * 256}


def test_pickle_scan_on_junk():
    assert pickle_headers(np.zeros(3, np.uint8)) == []
    assert pickle_headers(np.frombuffer(b"\x07\x00Sz" + b"\0" * 8, np.uint8)) == []
