"""No link or section reference of the README and docs/ rots: every relative link names a file of the
repository (and a heading of it, with #anchor), every `FILE.md, "Section"` reference a heading there."""
from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.readme import PAGES, ROOT

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SECTION_REF = re.compile(r"([\w./-]+\.md),\s+\"([^\"]+)\"")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _headings(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL | re.MULTILINE)
    headings = [m.group(1).strip() for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)]
    return headings + [m.group(1) for m in re.finditer(r"^\*\*(.+?)\.?\*\*", text, re.MULTILINE)]  # run-in


def _target(page: Path, name: str) -> Path:
    for base in (page.parent, ROOT, ROOT / "docs"):
        if (base / name).exists():
            return base / name
    return page.parent / name


def test_every_relative_link_names_a_file_and_heading():
    bad = []
    for page in PAGES:
        for m in LINK.finditer(page.read_text(encoding="utf-8")):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto: outside the repository
            name, _, anchor = target.partition("#")
            file = _target(page, name) if name else page
            if not file.exists():
                bad.append(f"{page.name}: {target} (no such file)")
            elif anchor and anchor not in {_slug(h) for h in _headings(file)}:
                bad.append(f"{page.name}: {target} (no such heading)")
    assert not bad, "\n".join(bad)


def test_every_section_reference_names_a_heading():
    bad = []
    for page in PAGES:
        text = re.sub(r"\s+", " ", page.read_text(encoding="utf-8"))
        for m in SECTION_REF.finditer(text):
            file, section = _target(page, m.group(1)), m.group(2).strip("`")
            if not file.exists() or not any(h.replace("`", "").startswith(section.replace("`", ""))
                                             for h in _headings(file)):
                bad.append(f"{page.name}: {m.group(1)}, \"{m.group(2)}\"")
    assert not bad, "\n".join(bad)


def test_the_readme_fits_a_few_screens():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 100 and max(map(len, lines)) <= 130, (len(lines), max(map(len, lines)))
