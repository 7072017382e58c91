"""genie_config.json read as typed data: every field qnnrt uses, and a clear error (file, field,
what to do) for a missing or bad field, bad JSON, a missing file."""
from __future__ import annotations

import pytest

from qnnrt.errors import FormatError
from qnnrt.formats.genie import is_genie_bundle, read_genie_config
from tests.genie.conftest import edit_config, positional_encoding as _pe
from tests.helpers.data import GENIE_F32


def test_the_tiny_bundle_reads_as_its_config_says():
    c = read_genie_config(GENIE_F32)
    assert is_genie_bundle(GENIE_F32) and is_genie_bundle(GENIE_F32 / "genie_config.json")
    assert not is_genie_bundle(GENIE_F32.parent)
    assert (c.context.size, c.context.n_vocab, c.context.bos, c.context.eos) == (128, 384, 0, (1,))
    assert c.tokenizer == GENIE_F32 / "tokenizer.json"
    assert len(c.ctx_bins) == 4 and all(p.is_file() for p in c.ctx_bins)
    assert c.rope is not None and (c.rope.dim, c.rope.theta, c.rope.scaling) == (8, 10000.0, None)
    ext = c.backend.extensions
    assert ext is not None and (ext.soc_model, ext.perf_profile, ext.weight_sharing) == (43, "burst", False)
    assert (c.sampler.top_k, c.sampler.seed) == (1, 42)


def _set(path: list[str], value):
    def change(d):
        for k in path[:-1]:
            d = d[k]
        if value is KeyError:
            del d[path[-1]]
        else:
            d[path[-1]] = value
    return change


@pytest.mark.parametrize("path, value, says", [
    (["dialog", "context", "size"], KeyError, "dialog.context.size is missing"),
    (["dialog", "context", "n-vocab"], "384", "dialog.context.n-vocab is '384'; give a non-negative integer"),
    (["dialog", "context", "eos-token"], [1, -5], "dialog.context.eos-token is [1, -5]; give a token id"),
    (["dialog", "engine", "backend", "type"], "QnnGpu", "qnnrt runs Genie bundles of the QnnHtp backend"),
    (["dialog", "engine", "model", "binary", "ctx-bins"], [], "dialog.engine.model.binary.ctx-bins is []"),
    (["dialog", "engine", "model", "binary", "ctx-bins"], ["nope.bin"],
     "ctx-bins[0] names 'nope.bin', but"),
    (["dialog", "tokenizer", "path"], "missing.json", "dialog.tokenizer.path names 'missing.json'"),
    (["dialog", "engine", "backend", "extensions"], "ext.json", "dialog.engine.backend.extensions names"),
])
def test_a_bad_field_is_named_with_its_place_and_remedy(bundle_copy, path, value, says):
    edit_config(bundle_copy, _set(path, value))
    with pytest.raises(FormatError) as e:
        read_genie_config(bundle_copy)
    assert says in str(e.value) and "genie_config.json" in str(e.value)


def test_bad_json_names_line_and_column(bundle_copy):
    (bundle_copy / "genie_config.json").write_text('{"dialog": {"version": 1,,}}')
    with pytest.raises(FormatError, match=r"not valid JSON \(line 1, column 26"):
        read_genie_config(bundle_copy)
    (bundle_copy / "genie_config.json").write_text('{"dialog": 3}')
    with pytest.raises(FormatError, match="dialog must be a JSON object, got int"):
        read_genie_config(bundle_copy)


# ---------------------------------------------------------------------------------------------------
# config shapes Genie runs (each measured with libGenie.so: docs/genie.md), read as Genie reads them

def _read(bundle, change):
    edit_config(bundle, change)
    return read_genie_config(bundle)


def test_unset_ids_and_seed_are_minus_one(bundle_copy):
    def change(d):
        d["dialog"]["context"].update({"bos-token": -1, "eos-token": [1, -1], "eot-token": 5})
        d["dialog"]["sampler"]["seed"] = -1
    c = _read(bundle_copy, change)
    assert (c.context.bos, c.context.eos, c.context.eot, c.sampler.seed) == (None, (1,), 5, None)


def test_sampler_as_genie_reads_it(bundle_copy):
    """greedy: true does not make Genie take the argmax; absent fields are Genie's defaults."""
    from qnnrt.llm.genie_layout import genie_sampling
    c = _read(bundle_copy, lambda d: d["dialog"].__setitem__("sampler", {"version": 1, "greedy": True}))
    o = genie_sampling(c)
    assert (o.temperature, o.top_k, o.top_p, o.seed) == (0.8, 0, 0.8, None)
    c = _read(bundle_copy, lambda d: d["dialog"]["sampler"].update({"top-k": 0, "temp": 0.5, "top-p": 0.0}))
    assert (genie_sampling(c).top_k, genie_sampling(c).temperature) == (1, 0.5)     # top-p 0: the best alone


@pytest.mark.parametrize("temp, top_k, last_n, applies", [(0.7, 0, 64, True), (0.7, 0, 0, False),
                                                          (0.0, 0, 64, False), (0.7, 1, 64, False)])
def test_token_penalty_applies_where_genie_applies_it(bundle_copy, temp, top_k, last_n, applies):
    """Over the last n tokens, prompt included; none at penalize-last-n 0 nor where Genie takes the argmax."""
    from qnnrt.llm.genie_layout import genie_sampling
    pen = {"version": 1, "penalize-last-n": last_n, "repetition-penalty": 1.3, "frequency-penalty": 0.2}
    c = _read(bundle_copy, lambda d: d["dialog"]["sampler"].update({"temp": temp, "top-k": top_k,
                                                                    "token-penalty": pen}))
    o = genie_sampling(c)
    want = (1.3, 0.2, last_n) if applies else (1.0, 0.0, 0)
    assert (o.repetition_penalty, o.frequency_penalty, o.penalty_last_n) == want


def test_fcb_is_ctx_bins(bundle_copy):
    c = _read(bundle_copy, lambda d: d["dialog"]["engine"]["model"]["binary"].__setitem__(
        "fcb", d["dialog"]["engine"]["model"]["binary"].pop("ctx-bins")))
    assert len(c.ctx_bins) == 4


def test_positional_encoding_object_or_list_and_scaling(bundle_copy):
    c = _read(bundle_copy, _pe([{"type": "rope", "rope-dim": 8, "rope-theta": 500000,
                                 "rope-scaling": {"factor": 8.0, "original-max-position-embeddings": 32}}]))
    assert c.rope is not None and (c.rope.dim, c.rope.theta, c.rope.scaling) == (8, 500000.0, None)
    assert "no rope-type: unused" in (c.rope.note or "")


def test_longrope_is_read(bundle_copy):
    sc = {"rope-type": "longrope", "factor": 4.0, "original-max-position-embeddings": 64,
          "long-factor": [1, 2, 3, 4, 5, 6, 7, 8], "short-factor": [1] * 8}
    c = _read(bundle_copy, _pe({"type": "rope", "rope-dim": 8, "rope-theta": 10000, "rope-scaling": sc}))
    assert c.rope is not None and c.rope.scaling.long_factor == (1, 2, 3, 4, 5, 6, 7, 8)


def test_stop_sequences_are_read(bundle_copy):
    c = _read(bundle_copy, lambda d: d["dialog"].__setitem__("stop-sequence", [" and", ""]))
    assert c.stop_sequences == (" and",)


@pytest.mark.parametrize("change, says", [
    (lambda d: d["dialog"]["engine"]["model"]["binary"].__setitem__("fcb", ["x.bin"]),
     "binary.ctx-bins and fcb are both given; Genie takes one of the two"),
    (_pe({"type": "rope", "rope-dim": 8, "prefix": "vision_"}),
     "prefix is 'vision_': an encoding of the inputs vision_position_ids_cos / _sin; qnnrt computes the default"),
    (_pe({"type": "rope", "rope-dim": 8, "rope-scaling": {"rope-type": "longrope", "original-max-position-"
                                                                                      "embeddings": 64}}),
     "rope-scaling.factor is missing; longrope needs factor"),
    (_pe({"type": "rope", "rope-dim": 8, "rope-scaling": {"rope-type": "longrope", "factor": 4,
          "original-max-position-embeddings": 64, "long-factor": [1, 2], "short-factor": [1] * 8}}),
     "long-factor is [1, 2]; give 8 positive numbers"),
    (_pe({"type": "rope", "rope-dim": 8, "rope-scaling": {"rope-type": "yarnrope"}}),
     "rope-type is 'yarnrope'; qnnrt computes 'llama3', 'longrope' or 'default' scaling"),
    (lambda d: d["dialog"]["engine"]["model"].__setitem__("positional-encoding", {"type": "rope", "rope-dim": 8}),
     "positional-encoding is given beside QnnHtp rope-theta / pos-id-dim; Genie refuses the two together"),
    (lambda d: d["dialog"]["sampler"].update({"type": "custom", "callback-name": "mine"}),
     "sampler.type is 'custom'; qnnrt runs Genie's 'basic' sampler"),
    (lambda d: d["dialog"]["context"].__setitem__("bos-token", -2), "bos-token is -2; give a token id, or -1"),
    (lambda d: d["dialog"].pop("sampler"), "dialog.sampler is missing; give one"),
])
def test_shapes_genie_refuses_or_qnnrt_cannot_run_are_refused_in_one_line(bundle_copy, change, says):
    edit_config(bundle_copy, change)
    with pytest.raises(FormatError) as e:
        read_genie_config(bundle_copy)
    assert says in str(e.value) and "\n" not in str(e.value)
