"""The prepared LLM step (llm/prepared.py) against the generic path through ``Program.run``: the same
tokens and bit-identical logits (fp16 fixture, tiny quantized / float / kv-only files, chunked
prefill, KV reuse), and the graph reading the cache arrays themselves (no per-token copy)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from qnnrt import load
from qnnrt.llm import KVCache, LlmLayout, LlmRunner, build_step_inputs
from qnnrt.llm.prepared import StepBuffers
from qnnrt.llm.session import CachedGenerator
from tests.helpers.data import LLM_STORIES

FIX = LLM_STORIES


# -- numpy only: the in-place inputs equal the generic ones -------------------------------------
def _layout(T: int = 4, C: int = 16, L: int = 2, H: int = 2, D: int = 3, V: int = 5,
            kv_only: bool = False) -> LlmLayout:
    def method(T: int) -> dict:
        ins = [("tokens", (1, T), "int32"), ("atten_mask", (1, 1, T, C), "float32"),
               ("input_pos", (1, T), "int32")]
        ins += [(f"k{i}", (1, H, D, C - T), "float32") for i in range(L)]
        ins += [(f"v{i}", (1, H, C - T, D), "float32") for i in range(L)]
        outs = [("logits", (1, T, V), "float32")]
        outs += [(f"ko{i}", (1, H, D, T), "float32") for i in range(L)]
        outs += [(f"vo{i}", (1, H, T, D), "float32") for i in range(L)]
        return {"inputs": ins, "outputs": outs}
    methods = {"kv_forward": method(1)} | ({} if kv_only else {"prefill_forward": method(T)})
    return LlmLayout.from_program({"get_n_layers": L, "get_max_context_len": C}, methods)


@pytest.mark.parametrize("fused", [True, False])
def test_in_place_inputs_equal_the_generic_inputs_through_writes_and_truncation(fused):
    lay = _layout()
    rng = np.random.default_rng(0)
    generic, inplace = KVCache(lay), KVCache(lay, fused=fused)
    bufs = {m.name: StepBuffers(lambda s, d: np.zeros(s, d), lay, m, fused)
            for m in (lay.prefill, lay.decode)}
    # prefill chunks, decode steps, a truncation (a shared prefix), then prefill again
    plan = [("p", 4), ("p", 2), ("d", 1), ("d", 1), ("t", 3), ("p", 4), ("d", 1), ("r", 0), ("p", 3)]
    for what, n in plan:
        if what == "t":
            generic.truncate(n)
            inplace.truncate(n)
            continue
        if what == "r":
            generic.reset()
            inplace.reset()
            continue
        m = lay.prefill if what == "p" else lay.decode
        toks = rng.integers(0, 5, n).tolist()
        want = build_step_inputs(lay, m, generic, toks, pad_token=7)
        b = bufs[m.name]
        inplace.sync(m)
        b.write(toks, inplace.n_past, 7)
        ks, vs = inplace.arrays(m)
        got = [b.tokens, b.mask, *b.pos, *ks, *vs]
        for name, g in zip(m.input_names, got):
            np.testing.assert_array_equal(g, want[name], err_msg=f"{what} {name}")
            assert g.dtype == want[name].dtype
        outs_k = [rng.standard_normal((1, 2, 3, m.ar_len)).astype(np.float32) for _ in range(2)]
        outs_v = [rng.standard_normal((1, 2, m.ar_len, 3)).astype(np.float32) for _ in range(2)]
        generic.update(m, outs_k, outs_v, n)
        for dst, src in zip(b.k_out + b.v_out, outs_k + outs_v):
            dst[...] = src
        inplace.put(m, b.k_out, b.v_out, n, b.k_out_all, b.v_out_all)
    for a, c in zip(generic.k + generic.v, inplace.k + inplace.v):
        np.testing.assert_array_equal(a, c)


def test_decode_reads_the_logical_caches_and_prefill_its_mirror():
    lay = _layout()
    cache = KVCache(lay)
    ks, vs = cache.arrays(lay.decode)
    assert all(a is b for a, b in zip(ks + vs, cache.k + cache.v))
    assert all(k.base is cache.k_all for k in cache.k)        # one array per kind
    pk, _ = cache.arrays(lay.prefill)
    assert pk[0].shape == (1, 2, 3, 12) and not np.shares_memory(pk[0], cache.k_all)
    kv = _layout(kv_only=True)
    c2 = KVCache(kv)
    assert all(a is b for a, b in zip(c2.arrays(kv.prefill)[0], c2.k))


# -- on the simulator ---------------------------------------------------------------------------
def _compare(prog, prompt, n_new, *, cache_check=True):
    prepared, generic = LlmRunner(prog), LlmRunner(prog, prepared=False)
    assert prepared.prepared and not generic.prepared
    a = prepared.generate(prompt, n_new, eos_ids=[], keep_logits=True)
    b = generic.generate(prompt, n_new, eos_ids=[], keep_logits=True)
    assert a.tokens == b.tokens and len(a.tokens) == n_new
    assert all(np.array_equal(x, y) for x, y in zip(a.logits, b.logits))
    assert prepared.calls == generic.calls
    if cache_check:
        _assert_caches_bound(prepared)
    return a


def _assert_caches_bound(runner: LlmRunner) -> None:
    """The buffers each graph reads for the cache inputs are the cache arrays themselves."""
    cache = runner.new_cache()
    bound = runner.steps.prepare(cache)
    lay = runner.layout
    for m in {lay.prefill.name: lay.prefill, lay.decode.name: lay.decode}.values():
        ks, vs = cache.arrays(m)
        for name, arr in zip(m.input_names[3:], ks + vs):
            reads = bound[m.name].graph_reads(name)
            assert reads and all(r is arr for r in reads), (m.name, name)
    assert all(a is b for a, b in zip(cache.arrays(lay.decode)[0], cache.k))


@pytest.mark.slow
def test_fp16_fixture_prepared_equals_generic_for_64_steps():
    meta = json.loads((FIX / "meta.json").read_text())
    prompt = meta["prompt"] + meta["greedy_tokens"][:8]          # two prefill chunks
    with load(FIX / "model.pte") as prog:
        a = _compare(prog, prompt, 64)
        assert a.prefill_calls == 2
        r, g = LlmRunner(prog), LlmRunner(prog, prepared=False)
        seq = prompt + a.tokens[:20]
        sa, sb = r.score(seq, n_prefill=33), g.score(seq, n_prefill=33)
        assert all(np.array_equal(x, y) for x, y in zip(sa.logits, sb.logits))
        assert sa.logprobs == sb.logprobs


def test_prepared_decode_step_runs_its_graph_call_and_no_free():
    """The decode method bound to a cache is its one graph call: the .pte's frees of the cache
    inputs and outputs (the caller's arrays) free nothing and are not run (bench/RESULTS.md, issue 49)."""
    from qnnrt.executorch.steps import FreeStep
    from qnnrt.runtime.steps import GraphStep
    with load(FIX / "model.pte") as prog:
        r = LlmRunner(prog)
        cache = r.new_cache()
        plan = r.steps.prepare(cache)[r.layout.decode.name].prepared.plan
        assert [type(s) for s in plan.steps] == [GraphStep]
        assert not any(isinstance(s, FreeStep) for s in plan.steps)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.helpers.llm_pte import TinyLlm
    model = TinyLlm(seed=7)
    return model, model.binaries(tmp_path_factory.mktemp("tiny_llm"))


PROMPT = [30, 20, 22, 28, 19, 25]     # two prefill calls (4 + 2)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["quantized", "float", "kv-only"])
def test_tiny_files_prepared_equals_generic(tiny, tmp_path, variant):
    from tests.helpers.llm_pte import C, write_pte
    model, binaries = tiny
    kw = {"quantized": {}, "float": {"float_io": True},
          "kv-only": {"float_io": True, "method_order": ("kv_forward",)}}[variant]
    with load(str(write_pte(model, binaries, tmp_path / "m.pte", **kw))) as prog:
        lay = LlmRunner(prog, create_contexts=False).layout
        assert lay.mode == ("kv" if variant == "kv-only" else "hybrid")
        assert (lay.cache_dtype == np.uint8) == (variant == "quantized")
        # the quantized file dequantizes its caches on the CPU first: the kernels read them in place
        _compare(prog, PROMPT, C - len(PROMPT) - 1, cache_check=variant != "quantized")


@pytest.mark.slow
def test_kv_reuse_across_turns_prepared_equals_generic(tiny, tmp_path):
    from tests.helpers.llm_pte import write_pte
    model, binaries = tiny
    with load(str(write_pte(model, binaries, tmp_path / "m.pte", float_io=True))) as prog:
        out = []
        for prepared in (True, False):
            gen = CachedGenerator(LlmRunner(prog, prepared=prepared))
            r1, _ = gen.generate(PROMPT, 3, eos_ids=[])
            turn2 = PROMPT + r1.tokens + [5, 6]
            r2, reused = gen.generate(turn2, 3, eos_ids=[])
            r3, reused3 = gen.generate(turn2[:5] + [9], 2, eos_ids=[])  # a shorter shared prefix
            out.append((r1.tokens, r2.tokens, reused, r3.tokens, reused3, gen.cache.n_past,
                        [a.copy() for a in gen.cache.k]))
        a, b = out
        assert a[:6] == b[:6] and a[2] == len(PROMPT) + 2
        assert all(np.array_equal(x, y) for x, y in zip(a[6], b[6]))


@pytest.mark.slow
def test_multi_pd_caches_in_the_arena_are_read_in_place(tiny, tmp_path):
    """The prefill context in a PD worker: its graph call reads the caches and writes its outputs
    in the shared arena (no staged copy), and the tokens and logits are the generic path's."""
    from tests.helpers.llm_pte import write_pte
    model, binaries = tiny
    with load(str(write_pte(model, binaries, tmp_path / "m.pte", float_io=True)),
              residency="multi-pd:2") as prog:
        assert sorted(prog.hosts.host_of(k) for k in prog.binaries) == [0, 1]
        runner = LlmRunner(prog)
        a = _compare(prog, PROMPT, 8)
        remote = [g.binding.call for m in runner.steps.prepare(runner.new_cache()).values()
                  for g in m.prepared.plan.graph_steps if prog.hosts.host_of(g.key)]
        assert len(remote) == 1 and remote[0].staged == 0
        assert len(a.tokens) == 8
