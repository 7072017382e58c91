"""The README's Python examples run as written: the high-level one on the demo program (what
`qnnrt demo` builds), the low-level one on a real context binary, each with only the user's own
paths and names put in. (The serving client runs against a live server: tests/serve.)"""
from __future__ import annotations

import numpy as np

from tests.helpers.readme import block_with, python_blocks, substituted

# every Python block of the README is run by one of these markers' tests
MARKERS = ('qnnrt.load("program_dir"', "from qnnrt.core import", "from openai import OpenAI")


def test_every_readme_python_block_is_run_by_a_test():
    assert sorted(sum(m in b for m in MARKERS) for b in python_blocks()) == [1] * len(python_blocks())


def test_the_python_api_example_runs_on_the_demo_program(built_tiny_program, capsys):
    code = substituted(block_with(MARKERS[0]), {'"program_dir"': repr(str(built_tiny_program.out))})
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert set(scope["out"]) == {s.name for s in scope["m"].outputs}
    assert all(np.isfinite(v).all() for v in scope["out"].values())
    assert "creates" in capsys.readouterr().out


def test_the_low_level_example_runs_on_a_context_binary(small_binary):
    code = substituted(block_with(MARKERS[1]), {'"model.bin"': repr(str(small_binary.path)),
                                                '"my_graph"': repr(small_binary.graphs[0])})
    x = np.ones((1, 64), np.float32)
    scope: dict = {"x": x}
    exec(compile(code, "README.md", "exec"), scope)
    from tests.helpers.qnn_fixtures import add_relu_mul_ref
    np.testing.assert_allclose(scope["y"]["y"], add_relu_mul_ref(x), atol=0.02)
