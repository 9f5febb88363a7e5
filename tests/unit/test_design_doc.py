"""docs/design.md is the design the code cites: every section a reference names exists, and its Rooms table
names every folder of the package, so a new room is described when it is made."""

from __future__ import annotations

import re
from pathlib import Path

import jitguard

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
CITED = re.compile(r"""design\.md(?:\s+["']([^"']+)["']|#([a-z0-9-]+))""")
SOURCES = ("src", "docs", "tests", "benchmarks", "README.md")


def _headings() -> set[str]:
    return {line.lstrip("#").strip() for line in DESIGN.read_text().splitlines() if line.startswith("#")}


def _anchor(heading: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")


def _texts() -> list[tuple[Path, str]]:
    found = []
    for name in SOURCES:
        top = ROOT / name
        files = [top] if top.is_file() else [p for p in top.rglob("*") if p.suffix in (".py", ".md", ".json")]
        found += [(p, p.read_text(errors="replace")) for p in files if "__pycache__" not in p.parts]
    return found


def test_every_cited_section_of_the_design_exists() -> None:
    headings = _headings()
    anchors = {_anchor(h) for h in headings}
    cited = 0
    for path, text in _texts():
        for title, anchor in CITED.findall(text):
            cited += 1
            assert (title in headings) if title else (anchor in anchors), f"{path}: {title or anchor}"
    assert cited >= 10  # the contracts the code names: Finding, Fingerprint, Memory budget, ...


def test_no_reference_to_the_old_design_file_is_left() -> None:
    old = "DESIGN" + ".md"
    assert not [str(p) for p, text in _texts() if old in text]


def test_the_rooms_table_names_every_folder_of_the_package() -> None:
    package = Path(jitguard.__file__).parent
    rooms = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    section = DESIGN.read_text().split("## Rooms", 1)[1].split("\n## ", 1)[0]
    assert {room for room in rooms if f"`{room}/`" not in section} == set()


def test_no_reference_to_notes_outside_the_repository_is_left() -> None:
    """A reader of the repository has neither the team's notes nor its sibling folders."""
    outside = ("../" + "shared/", "FACTS" + ".md")
    assert not [str(p) for p, text in _texts() if any(name in text for name in outside)]
