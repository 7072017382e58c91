"""The committed Genie bundles (tools/fixtures/make_genie_bundle.py): structurally what their configs say,
their float references reproduced by the maker's numpy model, their graphs reproducing it on the CPU, and
Genie itself (libGenie.so from the onnxruntime-qnn wheel) giving the same greedy tokens on the simulator."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qnnrt.core.binary import ContextBinary
from tests.helpers.data import GENIE_AIHUB_F32, GENIE_AIHUB_W8A16, GENIE_F32, GENIE_F32_SHARED, GENIE_W8A16
from tests.helpers.genie_bundle import GENIE_RUNNER, Bundle, fixture_module
from tests.helpers.genie_bundle import run_genie as _genie

GRAPH = re.compile(r"(prompt|token)_ar(\d+)_cl(\d+)_(\d+)_of_(\d+)")


@pytest.fixture(scope="module")
def f32() -> Bundle:
    return Bundle.load(GENIE_F32)


def _shape(spec, name: str, ar: int) -> tuple[int, ...]:
    """What the config and model imply for tensor ``name`` of an AR-``ar`` graph."""
    M = fixture_module("genie_tiny_llama")
    CL, D, KVH, H = spec.context, spec.head_dim, spec.kv_heads, spec.hidden
    fixed = {"input_ids": (1, ar), "attention_mask": (1, 1, ar, CL), "position_ids_cos": (1, 1, ar, D // 2),
             "position_ids_sin": (1, 1, ar, D // 2), "logits": (1, ar, spec.vocab), M.EMBED: (1, ar, H)}
    if name in fixed:
        return fixed[name]
    if name.startswith("_model_model_layers_"):
        return (1, ar, H)
    kv = re.fullmatch(r"past_(key|value)_(\d+)_(in|out)", name)
    assert kv, f"unexpected tensor {name}"
    n = CL - ar if kv.group(3) == "in" else ar
    return (KVH, 1, D, n) if kv.group(1) == "key" else (KVH, 1, n, D)


def _quantization(bundle: Bundle) -> dict:
    import yaml
    path = bundle.root / "metadata.yaml"
    return yaml.safe_load(path.read_text())["tensors"] if bundle.meta.get("quantized") else {}


def _dtype(bundle: Bundle, name: str) -> type:
    """int32 token ids; float32 I/O, or in the quantized bundle uint8 KV and uint16 the rest."""
    if name == "input_ids":
        return np.int32
    if not bundle.meta.get("quantized"):
        return np.float32
    return np.uint8 if name.startswith("past_") else np.uint16


@pytest.mark.parametrize("root", [GENIE_F32, GENIE_F32_SHARED, GENIE_W8A16, GENIE_AIHUB_F32, GENIE_AIHUB_W8A16],
                         ids=["f32", "f32_shared", "w8a16", "aihub_f32", "aihub_w8a16"])
def test_bundle_is_what_its_config_says(root: Path) -> None:
    bundle = Bundle.load(root)
    spec, cfg = bundle.spec, bundle.config["dialog"]
    htp = cfg["engine"]["backend"]["QnnHtp"]
    assert (cfg["context"]["size"], cfg["context"]["n-vocab"]) == (spec.context, spec.vocab)
    assert (htp["kv-dim"], htp["pos-id-dim"]) == (spec.head_dim, spec.head_dim // 2)
    assert (root / cfg["tokenizer"]["path"]).is_file()
    ext = json.loads((root / cfg["engine"]["backend"]["extensions"]).read_text())
    quant = _quantization(bundle)
    layers: list[int] = []
    graphs: set[str] = set()
    for path in bundle.ctx_bins:
        with ContextBinary(path) as b:
            assert b.info.weight_sharing == ext["context"]["weight_sharing_enabled"], path.name
            for g in b.graphs:
                kind, ar, cl, part, parts = GRAPH.fullmatch(g.name).groups()
                assert (int(cl), int(parts)) == (spec.context, spec.parts)
                assert int(ar) == (bundle.meta["prompt_ar"] if kind == "prompt" else 1)
                for t in g.inputs + g.outputs:
                    assert t.shape == _shape(spec, t.name, int(ar)), (g.name, t.name)
                    assert t.dtype == _dtype(bundle, t.name), (g.name, t.name)
                    if t.name in quant:         # metadata.yaml says what the binary says
                        assert (t.quantization.scale, t.quantization.offset) == \
                            pytest.approx((quant[t.name]["scale"], quant[t.name]["offset"]), rel=1e-6)
                if kind == "prompt":
                    layers += [int(t.name.split("_")[2]) for t in g.inputs if t.name.startswith("past_key_")]
                graphs.add(g.name)
    assert graphs == {f"{k}_ar{ar}_cl{spec.context}_{p}_of_{spec.parts}"
                      for k, ar in (("prompt", bundle.meta["prompt_ar"]), ("token", 1))
                      for p in range(1, spec.parts + 1)}
    assert layers == list(range(spec.layers))


def test_references_are_the_numpy_models(f32: Bundle) -> None:
    """The committed weights regenerate from the seed, and the reference's greedy tokens from them."""
    from tokenizers import Tokenizer
    M, B = fixture_module("genie_tiny_llama"), fixture_module("make_genie_bundle")
    tok = Tokenizer.from_file(str(f32.root / "tokenizer.json"))
    w = f32.weights()
    regenerated = M.make_weights(f32.spec, B.word_tokens(tok))
    assert sorted(regenerated) == sorted(w) and all(np.array_equal(regenerated[k], w[k]) for k in w)
    for r in f32.meta["references"]:
        assert r["prompt_ids"] == [tok.token_to_id(B.BOS)] + tok.encode(r["prompt"]).ids
        gen = M.greedy(f32.spec, w, r["prompt_ids"], f32.meta["max_new_tokens"], f32.meta["eos"])
        assert gen.tokens == r["tokens"] and round(min(gen.margins), 4) == r["min_margin"]


def test_part_graphs_reproduce_the_reference_on_the_cpu(f32: Bundle) -> None:
    """The ONNX part graphs, run as Genie runs them with NaN in never-written cache slots (Genie leaves
    them uncleared), give the reference's tokens."""
    import onnxruntime as ort
    M = fixture_module("genie_tiny_llama")
    spec, w, ar = f32.spec, f32.weights(), f32.meta["prompt_ar"]
    sessions = {(p, a): ort.InferenceSession(M.part_model(spec, w, a, p).SerializeToString(),
                                             providers=["CPUExecutionProvider"])
                for p in range(1, spec.parts + 1) for a in (ar, 1)}

    def call(part: int, a: int, feeds: dict) -> dict:
        s = sessions[(part, a)]
        names = [o.name for o in s.get_outputs()]
        return dict(zip(names, s.run(names, {i.name: feeds[i.name] for i in s.get_inputs()})))

    for r in f32.meta["references"][:2]:
        got = M.run_bundle(spec, call, r["prompt_ids"], f32.meta["max_new_tokens"], ar, f32.meta["eos"],
                           unwritten=float("nan"))
        assert got == r["tokens"]


@pytest.mark.parametrize("index", [0, 3])
def test_genie_greedy_tokens_equal_the_float_reference(f32: Bundle, genie_library, index: int) -> None:
    """Genie on the simulator: GenieDialog_tokenQuery with the prompt (Genie prepends the config's
    bos-token itself), greedy by the config's sampler."""
    r = f32.meta["references"][index]
    assert r["prompt_ids"][0] == f32.config["dialog"]["context"]["bos-token"]
    done = _genie(f32.root, "--prompt-tokens", ",".join(map(str, r["prompt_ids"][1:])),
                  "--max-new-tokens", str(f32.meta["max_new_tokens"]))
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got["tokens"] == r["tokens"]
    assert len(got["decode_ms"]) == len(r["tokens"]) - 1 and got["decode_ms_median"] > 0


def test_genie_text_query_equals_the_reference_text(f32: Bundle, genie_library) -> None:
    """GenieDialog_query: Genie's own tokenizer on tokenizer.json, the reference's text back."""
    r = f32.meta["references"][1]
    done = _genie(f32.root, "--prompt", r["prompt"], "--max-new-tokens", str(f32.meta["max_new_tokens"]))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["text"] == r["text"]


def test_genie_on_the_quantized_bundle_gives_its_graphs_tokens(genie_library) -> None:
    """w8a16: Genie's greedy tokens are the quantized graphs' own (references.json quantized_tokens: the
    same graphs through ONNX Runtime's QNN EP on the simulator), which on the first prompt leave the float
    reference at the 4th token, where the float model's top-2 margin is 0.15 (docs/genie.md)."""
    w8 = Bundle.load(GENIE_W8A16)
    r = w8.meta["references"][0]
    done = _genie(w8.root, "--prompt-tokens", ",".join(map(str, r["prompt_ids"][1:])), "--max-new-tokens", "6")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)["tokens"]
    assert got == r["quantized_tokens"][:6]
    assert got[:3] == r["tokens"][:3] and got[3] != r["tokens"][3]


def _graph_specs(path: Path) -> list:
    with ContextBinary(path) as b:
        return [(g.name, [(t.name, t.shape, t.dtype) for t in g.inputs + g.outputs]) for g in b.graphs]


def test_the_maker_writes_the_committed_float_bundle(tmp_path: Path) -> None:
    """tools/fixtures/make_genie_bundle.py (graphs compiled through qnnrt's ONNX -> QNN path) writes the
    committed float bundle: the same files, byte for byte but the binaries, whose graphs and I/O are the
    same (QNN's compile of the same graph is not always byte-identical)."""
    out = tmp_path / GENIE_F32.name
    repo = GENIE_RUNNER.parents[1]      # this tree's qnnrt, whatever is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(repo / "tools" / "fixtures" / "make_genie_bundle.py"), str(out),
                           "--check"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    committed = sorted(p.name for p in GENIE_F32.iterdir())
    assert sorted(p.name for p in out.iterdir()) == committed
    for name in committed:
        if name.endswith(".bin"):
            assert _graph_specs(out / name) == _graph_specs(GENIE_F32 / name), name
        else:
            assert (out / name).read_bytes() == (GENIE_F32 / name).read_bytes(), name
