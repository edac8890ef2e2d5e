"""The repository stands alone: nothing it ships or documents points at a document or issue outside it.

Design facts the code relies on are written in docs/ and cited by heading; an issue number or a section
number of an outside document sends a reader nowhere once the repository is cloned on its own.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Ways of citing what a clone does not hold.
OUTSIDE_REFERENCES = re.compile(
    r"(?i)design\.md (?:section|§)\s*\d"
    r"|\bissues? #?\d+\b"
    r"|\.\./shared/"
    r"|shared (?:project )?folder"
    r"|the shared `?design\.md"
)
#: Text we write; generated modeling keeps upstream's own text and is checked against upstream instead.
WRITTEN_SUFFIXES = {".py", ".md", ".j2", ".jinja", ".yml", ".yaml", ".toml", ".txt", ".cfg"}


def _written_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    return [
        REPO_ROOT / name
        for name in listed
        if name and "/generated/" not in name and Path(name).suffix in WRITTEN_SUFFIXES
    ]


def outside_references(text: str) -> list[str]:
    """Each citation of an outside document or issue in ``text``."""
    return [match.group(0) for match in OUTSIDE_REFERENCES.finditer(text)]


def test_the_pattern_finds_each_kind_of_outside_citation() -> None:
    # Assembled from parts, so this file's own text is no citation for a plain grep of the repository.
    section, issue, issues, shared = "design.md " + "section 4", "issue " + "6", "issues " + "#12", "../" + "shared/"
    text = f"see {section}, {issue}, {issues} and {shared}design.md; docs/design.md, 'Budgets' is fine"
    assert outside_references(text) == [section, issue, issues, shared]


def test_the_pattern_finds_a_citation_at_the_start_of_a_sentence() -> None:
    issue, section = "Issue " + "6", "Design.md " + "Section 5"
    assert outside_references(f"{issue} counts it as refused. {section} says so.") == [issue, section]


def test_no_written_file_cites_a_document_or_issue_outside_the_repository() -> None:
    found = []
    for path in _written_files():
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            found += [f"{path.relative_to(REPO_ROOT)}:{number}: {hit}" for hit in outside_references(line)]
    assert not found, "cite docs/ by heading instead:\n" + "\n".join(found)
