"""Every code block of the README and docs/ runs as written: the Python examples (the high-level one
on the demo program, the low-level one on a real context binary, the README's on files of the clone,
each with only the user's own paths and names put in) and every shell line (the `qnnrt` commands
here, the rest by the tests or CI named below). The serving client runs against a live server:
tests/serve/test_readme_client.py."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys

import numpy as np

from tests.helpers.cli_helpers import qnnrt
from tests.helpers.readme import ROOT, block_with, python_blocks, shell_lines, substituted

# every Python block is run by one of these markers' tests
MARKERS = ('qnnrt.load("tests/data/executorch/many_4_fp16', 'qnnrt.load("program_dir"', "from qnnrt.core import",
           "from openai import OpenAI")
# shell lines run elsewhere: the line's start -> what runs it
RUN_ELSEWHERE = {
    "pip install -e . && qnnrt demo": "the fresh-clone check of .ci/run's install; `qnnrt demo` in "
                                      "tests/cli/test_trace_cli.py",
    "pip install -e '.[test]' && python -m pytest -q": ".ci/run",
    "qnnrt serve tests/data/genie/tiny_llama_f32 --model-name tiny --api-key": "tests/serve/test_readme_client.py",
    "qnnrt serve tests/data/genie/tiny_llama_f32 --model-name tiny --embeddings":
        "tests/serve/test_serve_embeddings_pte.py",
}
COMMANDS = [line for _, line in shell_lines() if not any(line.startswith(k) for k in RUN_ELSEWHERE)]


def test_every_python_block_is_run_by_a_test():
    assert sorted(sum(m in b for m in MARKERS) for b in python_blocks()) == [1] * len(python_blocks())


def test_every_shell_line_is_run_by_a_test():
    assert all(line.startswith(("qnnrt ", "python tools/")) for line in COMMANDS), COMMANDS   # run below
    for start in RUN_ELSEWHERE:
        assert any(line.startswith(start) for _, line in shell_lines()), f"no shell line starts with {start!r}"


def test_the_commands_run_as_written_from_the_clone(tmp_path):
    """Every other shell line, in order, as a user types them in the clone: here a folder whose tests/
    and tools/ are the clone's, so what the commands write stays out of the repository."""
    for name in ("tests", "tools"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for command in COMMANDS:
        argv = shlex.split(command)
        if argv[0] == "python":
            r = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=600)
        else:
            r = qnnrt(*argv[1:], cwd=str(tmp_path))
        assert r.returncode == 0, (command, r.stderr[-2000:])
        assert r.stdout.strip() or r.stderr.strip(), command


def test_the_readme_python_example_runs_on_the_clones_files(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    exec(compile(block_with(MARKERS[0]), "README.md", "exec"), scope)
    ref = np.load(ROOT / "tests/data/executorch/many_4_fp16/forward_ref_0.npy")
    (out,) = scope["out"].values()
    np.testing.assert_allclose(out, ref, atol=0.02)
    assert "creates" in capsys.readouterr().out


def test_the_python_api_example_runs_on_the_demo_program(built_tiny_program, capsys):
    code = substituted(block_with(MARKERS[1]), {'"program_dir"': repr(str(built_tiny_program.out))})
    scope: dict = {}
    exec(compile(code, "docs/python.md", "exec"), scope)
    assert set(scope["out"]) == {s.name for s in scope["m"].outputs}
    assert all(np.isfinite(v).all() for v in scope["out"].values())
    assert "creates" in capsys.readouterr().out


def test_the_low_level_example_runs_on_a_context_binary(small_binary):
    code = substituted(block_with(MARKERS[2]), {'"model.bin"': repr(str(small_binary.path)),
                                                '"my_graph"': repr(small_binary.graphs[0])})
    x = np.ones((1, 64), np.float32)
    scope: dict = {"x": x}
    exec(compile(code, "docs/python.md", "exec"), scope)
    from tests.helpers.qnn_fixtures import add_relu_mul_ref
    np.testing.assert_allclose(scope["y"]["y"], add_relu_mul_ref(x), atol=0.02)
