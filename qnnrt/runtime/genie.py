"""A Genie bundle's graphs as runtime Methods. Every part binary holds (or, where the graphs could
not share weights, the bundle's binaries together hold) one graph per variant of each part: a
prompt graph (``prompt_ar128_cl4096_1_of_4``: AR tokens per call) and a token graph
(``token_ar1_cl4096_1_of_4``). As Genie does, the variant of a graph is read from its tensors'
shapes (AR and CL from ``attention_mask`` [1,1,AR,CL], else ``input_ids`` [1,AR] or a hidden-state
input [1,AR,E]), not from its name; a part's index is the ``_i_of_N`` suffix where the names carry
one, else its place among its variant's graphs sorted by name (Genie's order; a bundle of one
binary per AR, each graph the whole model, is one part). Each variant becomes one `GraphChainMethod`, its
parts wired by tensor name: ``token`` (AR 1), ``prompt`` (the widest AR), ``prompt_arN`` for any
other width."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from qnnrt.core import ContextBinary
from qnnrt.core.binary import GraphSpec
from qnnrt.errors import FormatError
from qnnrt.runtime.graph_chain import GraphChainMethod, GraphRef
from qnnrt.runtime.method import Method

TOKEN_METHOD = "token"
PROMPT_METHOD = "prompt"
_PART = re.compile(r"_(\d+)_of_(\d+)$")
_CL = re.compile(r"(?:^|_)cl(\d+)(?:_|$)")
MASK_INPUT = "attention_mask"
TOKEN_INPUT = "input_ids"


@dataclass(frozen=True)
class Window:
    """What one graph call processes: AR tokens over a context of CL (None: the graph has no mask,
    so its CL is its variant's)."""
    ar: int
    cl: int | None


def graph_window(spec: GraphSpec, where: str) -> Window:
    """AR and CL of a graph from its inputs' shapes."""
    by_name = {t.name: t for t in spec.inputs}
    mask = by_name.get(MASK_INPUT)
    if mask is not None:
        if len(mask.shape) != 4 or mask.shape[:2] != (1, 1):
            raise FormatError(f"{where}: graph {spec.name!r} input {MASK_INPUT} has shape "
                              f"{list(mask.shape)}; Genie's is [1, 1, AR, CL]")
        return Window(int(mask.shape[2]), int(mask.shape[3]))
    ids = by_name.get(TOKEN_INPUT)
    if ids is not None:
        if len(ids.shape) != 2 or ids.shape[0] != 1:
            raise FormatError(f"{where}: graph {spec.name!r} input {TOKEN_INPUT} has shape "
                              f"{list(ids.shape)}; Genie's is [1, AR]")
        return Window(int(ids.shape[1]), None)
    for t in spec.inputs:
        if len(t.shape) == 3 and t.shape[0] == 1:
            return Window(int(t.shape[1]), None)
    raise FormatError(f"{where}: graph {spec.name!r} has no {MASK_INPUT}, {TOKEN_INPUT} or hidden-state "
                      f"[1, AR, E] input to tell its AR from (inputs: {[t.name for t in spec.inputs]})")


def variant_name(ar: int, widest: int) -> str:
    return TOKEN_METHOD if ar == 1 else PROMPT_METHOD if ar == widest else f"{PROMPT_METHOD}_ar{ar}"


@dataclass(frozen=True)
class PartGraph:
    part: int          # 0-based
    window: Window
    ref: GraphRef
    cl: int | None     # the variant's context length: the mask's, else the name's ``cl<N>``


def _name_cl(name: str) -> int | None:
    m = _CL.search(name)
    return int(m.group(1)) if m else None


def _part_graphs(keys: Sequence[str], binaries: Mapping[str, ContextBinary]) -> list[PartGraph]:
    """Every graph of the bundle with its part index, window and context length. The part index is
    the ``_i_of_N`` suffix; graphs without one are ordered as Genie orders them, by name, among the
    graphs of their variant (AR, CL): one graph per variant (a binary per AR, each the whole model)
    is part 1 of 1."""
    found = []
    for key in keys:
        b = binaries[key]
        for spec in b.graphs:
            w = graph_window(spec, b.where)
            m = _PART.search(spec.name)
            if m and int(m.group(2)) < 1:
                raise FormatError(f"{b.where}: graph {spec.name!r} says part {m.group(1)} of {m.group(2)}")
            found.append((spec, key, w, w.cl if w.cl is not None else _name_cl(spec.name), m))
    if not found:
        raise FormatError(f"the bundle's {len(keys)} context binaries hold no graphs")
    unnumbered: dict[tuple[int, int | None], list[str]] = {}
    for spec, _, w, cl, m in found:
        if m is None:
            unnumbered.setdefault((w.ar, cl), []).append(spec.name)
    out = []
    for spec, key, w, cl, m in found:
        part = int(m.group(1)) - 1 if m else sorted(unnumbered[(w.ar, cl)]).index(spec.name)
        out.append(PartGraph(part, w, GraphRef(key, spec), cl))
    return out


def _chosen_cl(graphs: list[PartGraph], context: int | None) -> int | None:
    """Of several context-length variants, the one qnnrt runs: the smallest holding the config's
    context size, else the largest (Genie may switch between them as a dialog grows; the tokens
    are the same up to the graphs' arithmetic)."""
    cls = sorted({g.cl for g in graphs if g.cl is not None})
    if len(cls) < 2:
        return None
    fits = [c for c in cls if context is not None and c >= context]
    return fits[0] if fits else cls[-1]


def genie_methods(keys: Sequence[str], binaries: Mapping[str, ContextBinary],
                  context: int | None = None) -> dict[str, Method]:
    """One method per variant (module docstring); every part must have exactly one graph of each
    variant, else a FormatError naming the part and the graphs found. With several context-length
    variants, those of `_chosen_cl` (`context`: the config's context size)."""
    graphs = _part_graphs(keys, binaries)
    cl = _chosen_cl(graphs, context)
    if cl is not None:
        graphs = [g for g in graphs if g.cl in (cl, None)]
    parts = sorted({g.part for g in graphs})
    totals = {int(m.group(2)) for g in graphs if (m := _PART.search(g.ref.spec.name))}
    if len(totals) > 1:
        raise FormatError(f"Genie bundle: the graphs' names say different part counts ({sorted(totals)})")
    if totals and parts != list(range(max(totals))):
        missing = [i + 1 for i in range(max(totals)) if i not in parts]
        raise FormatError(f"Genie bundle: no graph of part(s) {missing} of {max(totals)} in the binaries "
                          f"{list(keys)}; list every part's binary in engine.model.binary.ctx-bins")
    ars = sorted({g.window.ar for g in graphs})
    widest = ars[-1]
    methods: dict[str, Method] = {}
    for ar in ars:
        chain = []
        for part in parts:
            here = [g for g in graphs if g.part == part and g.window.ar == ar]
            if len(here) != 1:
                found = {g.ref.spec.name: f"AR {g.window.ar}" for g in graphs if g.part == part}
                raise FormatError(f"Genie bundle: part {part + 1} of {len(parts)} has {len(here)} graphs of "
                                  f"AR {ar} (graphs of that part: {found}); each part needs one graph "
                                  f"per variant (prompt and token)")
            chain.append(here[0])
        cls = {g.window.cl for g in chain if g.window.cl is not None}
        if len(cls) > 1:
            raise FormatError(f"Genie bundle: the AR {ar} graphs disagree on the context length "
                              f"({sorted(cls)}): {[g.ref.spec.name for g in chain]}")
        methods[variant_name(ar, widest)] = GraphChainMethod(variant_name(ar, widest),
                                                             [g.ref for g in chain])
    return methods


def context_lengths(keys: Sequence[str], binaries: Mapping[str, ContextBinary]) -> list[int]:
    """Every context length the bundle's graphs are compiled for (inspect lists them)."""
    return sorted({g.cl for g in _part_graphs(keys, binaries) if g.cl is not None})
