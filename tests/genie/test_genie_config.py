"""genie_config.json read as typed data: every field qnnrt uses, and a clear error (file, field,
what to do) for a missing or bad field, bad JSON, a missing file."""
from __future__ import annotations

import pytest

from qnnrt.errors import FormatError
from qnnrt.formats.genie import is_genie_bundle, read_genie_config
from tests.genie.conftest import edit_config
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
    (["dialog", "context", "eos-token"], [1, 9999], "dialog.context.eos-token"),
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
