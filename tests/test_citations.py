"""Every document, design section and module that a tracked file cites exists in the repo.

Someone who clones the repository has only what is tracked: a reference to a document
outside it (the old top-level design file, a shared folder) or to a section of docs/design.md that
does not exist cannot be followed.
"""

from __future__ import annotations

import importlib
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
OLD = ".".join(
    ("DESIGN", "md")
)  # the contract's old name, outside the repo (split so grep finds none)
SELF = Path(__file__).resolve()  # its own examples below cite missing things on purpose

# A markdown document named in running text, code or a link (not a URL).
DOC = re.compile(r"(?<![\w/.:${-])((?:\.\./|[\w-]+/)*[\w.-]*[\w-]\.md)\b")  # not "$ROOT/x.md"
# "design.md §4.2", "design.md §2-§4", "design.md §4.4 to §4.5" (any dash), "design.md §1, §3".
SECTIONS = re.compile(r"design\.md\)?\s+((?:§[0-9]+(?:\.[0-9]+)*[\s,;\u2013-]*(?:and\s+)?)+)")
SECTION = re.compile(r"§([0-9]+(?:\.[0-9]+)*)")
HEADING = re.compile(r"^#{2,3} §([0-9]+(?:\.[0-9]+)*) ", re.M)
# Sphinx roles naming one of our objects: :func:`app.core.nodeipam.select`, :class:`~app...`.
ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc):`~?(app(?:\.\w+)+)`")
MD_MODULE = re.compile(r"`(app(?:\.(?!py`)\w+)+)`")  # not a file name such as `app.py`


def tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    files = []
    for name in filter(None, out.split("\0")):
        path = ROOT / name
        if path.suffix in {".png", ".gz", ".sum"} or not path.is_file() or path == SELF:
            continue
        files.append(path)
    return files


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def document_citations(path: Path, text: str) -> list[str]:
    """The cited documents in ``text`` that resolve neither from the root nor from ``path``."""
    missing = []
    for match in DOC.finditer(text):
        target = match.group(1)
        start = match.start(1)
        if text[max(0, start - 8) : start].rstrip().endswith(("://", "http", "https")):
            continue
        if any(_in_repo(base / target) for base in (ROOT, path.parent)):
            continue
        line = text.count("\n", 0, start) + 1
        missing.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    return missing


def _in_repo(path: Path) -> bool:
    resolved = path.resolve()
    return resolved.is_relative_to(ROOT) and resolved.is_file()


@cache
def design_sections() -> frozenset[str]:
    return frozenset(HEADING.findall(DESIGN.read_text(encoding="utf-8")))


def section_citations(path: Path, text: str) -> list[str]:
    """The ``docs/design.md §N`` citations in ``text`` naming no heading of docs/design.md."""
    missing = []
    for match in SECTIONS.finditer(text):
        for number in SECTION.findall(match.group(1)):
            if number not in design_sections():
                line = text.count("\n", 0, match.start()) + 1
                missing.append(f"{path.relative_to(ROOT)}:{line}: §{number}")
    return missing


def resolves(dotted: str) -> bool:
    """``app.a.b.c`` names a module, or an attribute chain under the longest module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def module_citations(path: Path, text: str) -> list[str]:
    """Sphinx roles (Python) and backticked names (Markdown) of ``app.*`` that do not resolve."""
    pattern = ROLE if path.suffix == ".py" else MD_MODULE if path.suffix == ".md" else None
    if pattern is None:
        return []
    missing = []
    for match in pattern.finditer(text):
        if not resolves(match.group(1).rstrip(".")):
            line = text.count("\n", 0, match.start()) + 1
            missing.append(f"{path.relative_to(ROOT)}:{line}: {match.group(1)}")
    return missing


def test_the_design_document_exists_with_numbered_sections() -> None:
    assert {"1", "2", "3", "4", "4.1", "5", "6", "7", "8", "9"} <= design_sections()


def test_every_cited_document_is_in_the_repository() -> None:
    missing = [m for p in tracked_text_files() for m in document_citations(p, _text(p))]
    assert not missing, "cited documents that are not in the repository:\n" + "\n".join(missing)


def test_every_cited_design_section_exists() -> None:
    missing = [m for p in tracked_text_files() for m in section_citations(p, _text(p))]
    assert not missing, "docs/design.md sections that do not exist:\n" + "\n".join(missing)


def test_every_cited_module_of_ours_exists() -> None:
    missing = [m for p in tracked_text_files() for m in module_citations(p, _text(p))]
    assert not missing, "app.* names that do not resolve:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (f"see {OLD} §4", [f"x.py:1: {OLD}"]),
        (f"see ../shared/{OLD}", [f"x.py:1: ../shared/{OLD}"]),
        ("see docs/design.md §4.1 and README.md", []),
        ("https://example.org/a/b.md is a URL", []),
        ('cp "$ROOT/README.md" .', []),
    ],
)
def test_the_document_check_finds_what_is_missing(text: str, found: list[str]) -> None:
    assert document_citations(ROOT / "x.py", text) == found


def test_the_section_and_module_checks_can_fail() -> None:
    assert section_citations(ROOT / "x.py", "docs/design.md §4.2-§4.99") == ["x.py:1: §4.99"]
    assert module_citations(ROOT / "x.py", ":func:`app.core.nodeipam.nope`") == [
        "x.py:1: app.core.nodeipam.nope"
    ]
    assert module_citations(ROOT / "x.py", ":func:`app.core.nodeipam.select`") == []
