"""The repository carries its own evidence: no file names a path of the machine it was written on,
bench/RESULTS.md is one clean document, and every script it names is in the repository."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("README.md", "qnnrt", "tests", "bench", "tools", "docs", ".ci", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".md", ".sh", ".c", ".toml", ".json", ".txt", ".cfg", ".yaml", ".yml", ""}
# a machine's own folders: a file that names one works on that machine only
MACHINE_PATH = re.compile(r"(?<![\w.])(/work/|/root/|/home/[a-z]|/Users/|\.\./shared/)")
RESULTS = ROOT / "bench" / "RESULTS.md"
SCRIPT = re.compile(r"(?<![\w/.-])([\w./-]*[\w-]\.(?:py|sh))\b")
# scripts of other projects that RESULTS.md names as such (ExecuTorch's llama export script, in its wheel)
FOREIGN = {"llama.py", "examples/qualcomm/oss_scripts/llama/llama.py"}


def _text_files() -> list[Path]:
    """Every text file of the checked folders but this one (whose pattern names what it looks for)."""
    out = []
    for name in CHECKED:
        top = ROOT / name
        files = [top] if top.is_file() else [f for f in top.rglob("*") if f.is_file()]
        out += [f for f in files if f.suffix in TEXT_SUFFIXES and "__pycache__" not in f.parts
                and f.stat().st_size < 1 << 20 and f != Path(__file__).resolve()]
    return out


def test_no_file_names_a_path_of_the_machine_it_was_written_on():
    found = []
    for f in _text_files():
        text = f.read_text(encoding="utf-8", errors="replace")
        found += [f"{f.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
                  for m in MACHINE_PATH.finditer(text)]
    assert not found, "\n".join(found)


def test_results_has_no_merge_debris():
    lines = RESULTS.read_text(encoding="utf-8").splitlines()
    debris = [i + 1 for i, line in enumerate(lines) if re.match(r"^(<{7}|={7}|>{7})( |$)", line)]
    assert not debris, f"conflict markers at lines {debris}"


def _script_exists(name: str) -> bool:
    """In the repository, or an artifact a named command makes (`ANCHOR/env.sh`: a folder the
    document names in capitals), or another project's script named as such."""
    if name in FOREIGN or name.split("/", 1)[0].isupper():
        return True
    if "/" in name:
        return any((base / name).is_file() for base in (ROOT, ROOT / "qnnrt"))
    return any((ROOT / folder / name).is_file()
               for folder in ("bench", "bench/anchor", "tools", "tools/fixtures", "tests/fuzz"))


@pytest.mark.parametrize("doc", ["bench/RESULTS.md", "docs/RELIABILITY.md"])
def test_every_script_a_results_document_names_is_in_the_repository(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    missing = sorted({m.group(1) for m in SCRIPT.finditer(text) if not _script_exists(m.group(1))})
    assert not missing, f"{doc} names scripts that are not in the repository: {missing}"
