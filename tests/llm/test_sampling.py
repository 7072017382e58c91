"""The sampler's knobs as their formulas say (logit bias, repetition / frequency / presence
penalties, min-p, seeds), and constrained decoding with llguidance: random logits masked to a JSON
schema always give JSON that validates."""
from __future__ import annotations

import json

import numpy as np
import pytest

from qnnrt.errors import InputError
from qnnrt.llm.sampling import Sampler, SamplingOptions, apply_logit_bias, apply_penalties
from tests.helpers.llm_text import text_folder  # noqa: F401


def test_logit_bias_adds_to_the_named_tokens():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    apply_logit_bias(x, {0: 10.0, 3: -100.0})
    assert x.tolist() == [11.0, 2.0, 3.0, -96.0]


def test_penalties_follow_their_formulas():
    x = np.array([2.0, -2.0, 1.0, 5.0])
    apply_penalties(x, {0: 3, 1: 1}, repetition=2.0, frequency=0.5, presence=0.25)
    # repetition (CTRL): positive / 2, negative * 2; then - count * frequency - presence
    assert x.tolist() == [2.0 / 2 - 3 * 0.5 - 0.25, -2.0 * 2 - 1 * 0.5 - 0.25, 1.0, 5.0]


def test_sampler_counts_what_it_chose_for_the_penalties():
    s = Sampler(SamplingOptions(frequency_penalty=2.0))
    logits = np.array([0.0, 3.0, 2.5])
    assert [s(logits) for _ in range(3)] == [1, 2, 1]   # 3; then 2.5 > 3-2; then 3-2 > 2.5-2 > 0
    assert s.counts == {1: 2, 2: 1}


def test_greedy_with_a_bias_picks_the_biased_token():
    s = Sampler(SamplingOptions(logit_bias={0: 100.0}))
    assert s(np.array([0.0, 50.0, 60.0])) == 0


def test_min_p_keeps_only_tokens_near_the_best():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    seen = {Sampler(SamplingOptions(temperature=1.0, min_p=0.5, seed=i))(logits) for i in range(200)}
    assert seen == {0, 1}                         # 0.15 and 0.05 are below half of 0.5
    seen = {Sampler(SamplingOptions(temperature=1.0, seed=i))(logits) for i in range(200)}
    assert seen == {0, 1, 2, 3}


def test_a_seed_is_reproducible_and_each_choice_has_its_own():
    rng = np.random.default_rng(0)
    rows = [rng.normal(size=64) for _ in range(20)]
    o = SamplingOptions(temperature=1.0, seed=7)

    def run(opts: SamplingOptions) -> list[int]:
        s = Sampler(opts)
        return [s(r) for r in rows]

    assert run(o) == run(o)
    assert o.for_choice(0) == o
    assert o.for_choice(1) == o.for_choice(1) and o.for_choice(1).seed != o.seed
    assert run(o.for_choice(1)) != run(o)
    assert SamplingOptions(seed=None).for_choice(3).seed is None


@pytest.mark.parametrize("bad", [dict(min_p=1.5), dict(repetition_penalty=0.0), dict(top_p=0.0),
                                 dict(temperature=-1.0)])
def test_options_out_of_range_are_refused(bad):
    with pytest.raises(ValueError):
        SamplingOptions(**bad)


# -- constrained decoding -------------------------------------------------------------------------
SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                      "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}},
     "required": ["color", "tags"], "additionalProperties": False},
    {"type": "object", "properties": {"point": {"type": "object", "properties": {
        "x": {"type": "number"}, "y": {"type": "integer"}}, "required": ["x", "y"], "additionalProperties": False},
        "ok": {"type": "boolean"}}, "required": ["point"], "additionalProperties": False},
]


@pytest.fixture(scope="module")
def grammars(text_folder):  # noqa: F811
    pytest.importorskip("llguidance", reason="structured output needs llguidance (pip install -e '.[serve]')")
    from qnnrt.llm.grammar import GrammarCompiler
    from qnnrt.llm.text import TextTokenizer
    tok = TextTokenizer.from_path(text_folder)
    return tok, GrammarCompiler(tok, 512, [2])


@pytest.mark.parametrize("schema", SCHEMAS, ids=["flat", "enum-array", "nested"])
def test_random_logits_under_a_schema_always_validate(grammars, schema):
    jsonschema = pytest.importorskip("jsonschema")
    tok, compiler = grammars
    grammar = compiler.json_schema(schema)
    rng = np.random.default_rng(0)
    for seed in range(4):
        s = Sampler(SamplingOptions(temperature=1.0, seed=seed), grammar.matcher())
        out: list[int] = []
        while len(out) < 400:
            t = s(rng.normal(size=512) * 3)
            if t == 2:
                break
            out.append(t)
        assert len(out) < 400, "the grammar never let the end of sequence through"
        jsonschema.validate(json.loads(tok.decode(out)), schema)


def test_a_schema_the_library_cannot_compile_names_the_part(grammars):
    from qnnrt.llm.errors import GrammarError
    _, compiler = grammars
    bad = {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "string", "pattern": "(?<=x)y"}}}}}
    with pytest.raises(GrammarError, match=r"(?s)^at /properties/a/properties/b: .*look-around"):
        compiler.json_schema(bad)
    with pytest.raises(GrammarError, match=r"^at /: .*Invalid type"):
        compiler.json_schema({"type": "wrong"})


@pytest.mark.parametrize("temperature", [5e-324, 1e-300, 1e-12])
def test_a_tiny_temperature_is_greedy_and_never_fails(temperature):
    """Found by the API fuzzer: logits / 5e-324 overflowed to inf, every token was dropped as not
    finite, and choosing from nothing raised IndexError (a 500)."""
    logits = np.array([0.0, 3.0, -2.0, 3.0 - 1e-9, -np.inf])
    for seed in range(5):
        s = Sampler(SamplingOptions(temperature=temperature, seed=seed, top_p=0.5, min_p=0.1))
        assert s(logits) == 1


def test_a_tiny_repetition_penalty_keeps_a_choice():
    s = Sampler(SamplingOptions(temperature=1.0, seed=0, repetition_penalty=5e-324))
    logits = np.array([1.0, 2.0, 0.5])
    first = s(logits)
    assert s(logits) == first           # its logit divided by 5e-324: the largest float, chosen again


def test_a_logit_past_the_largest_float_is_cut_to_it_and_stays_the_best():
    """The model's own inf (or a penalty's) is the largest float, not dropped as not finite."""
    logits = np.array([1.0, np.inf, 0.5, -np.inf], dtype=np.float32)
    s = Sampler(SamplingOptions(temperature=1.0, seed=0))
    x = s.adjusted(logits)
    assert x[1] == np.finfo(np.float64).max and x[3] == -np.inf and x[0] == 1.0
    assert s(logits) == 1 and Sampler()(logits) == 1


def test_a_penalty_window_counts_the_last_n_tokens_of_the_sequence():
    """penalty_last_n (a Genie config's penalize-last-n): the prompt's tokens count, and a token
    leaves the window n tokens later."""
    s = Sampler(SamplingOptions(repetition_penalty=2.0, penalty_last_n=3), history=[4, 5, 1, 2])
    assert s.counts == {5: 1, 1: 1, 2: 1}
    row = np.zeros(8)
    row[5], row[6] = 1.0, 0.9
    assert s(row) == 6                  # 5 is in the window (1.0 / 2 < 0.9)
    assert s(row) == 5 and s.counts == {2: 1, 6: 1, 5: 1}    # 5 left it; 6 is in it
    assert Sampler(SamplingOptions(repetition_penalty=2.0), history=[5])(row) == 5   # 0: the sampler's own


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def testplain_greedy_reads_the_row_as_the_adjusted_path_does(dtype):
    """Greedy with nothing to adjust takes the row's own argmax (no float64 copy): the same token
    as the adjusting path (forced here by a zero bias) on ties, infs and NaN, the same refusals."""
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal(257).astype(dtype) for _ in range(20)]
    rows += [np.array(r) for r in ([1, 3, 3, 0], [-np.inf, 2, np.inf, np.inf], [0, np.nan, 5, np.nan],
                                   [np.nan] * 3, [2.0, 2.0])]
    for row in rows:
        row = np.asarray(row, dtype=dtype).reshape(1, 1, -1)
        plain, adjusting = Sampler(), Sampler(SamplingOptions(logit_bias={0: 0.0}))
        assert plain.plain_greedy(row) and not adjusting.plain_greedy(row)
        try:
            want = adjusting(row)
        except InputError:
            with pytest.raises(InputError, match="no token is allowed"):
                plain(row)
            continue
        assert plain(row) == want and plain.counts == adjusting.counts
    for row in (np.full(4, -np.inf, dtype), ):
        with pytest.raises(InputError, match="no token is allowed"):
            Sampler()(row)
