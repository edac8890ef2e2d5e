"""Template versions without tags: a scaffold records the commit id of the template it was rendered from.

The template is ``copier.yml`` and ``template/`` of this repository (:data:`TEMPLATE_PATHS`). Its version at
a commit is the last commit, up to and including that one, that changed either of them
(:func:`template_version`); at ``HEAD`` it is *the current template version*. A scaffold records a
version as ``_commit`` in its ``.copier-answers.yml``, always as a full 40-hex commit id, which every
clone of the repository can check out: git tags do not travel with this repository's clones, and an
abbreviated id may become ambiguous as the history grows.

Copier itself records ``git describe --tags --always`` of the commit it rendered: an abbreviated id when
the repository has no tags, a ``<tag>-<n>-g<id>`` name where someone has a local tag. ``scaffold-update``
rewrites that line (:func:`record_version`) to the full id of the template version, and the template
drift check (:func:`drifted`, ``scaffold-update --check`` and tests/template/test_versions.py) fails
while a scaffold records anything else.

A commit cannot record its own id, so a template change takes two commits: commit the template (its id
is the new template version), run ``scaffold-update``, commit the updated scaffolds. The second commit
leaves ``copier.yml`` and ``template/`` alone, so the template version stays the first commit.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from modelgraft.scaffold.folders import ANSWERS_FILE, model_scaffolds
from modelgraft.scaffold.git import git

#: What the template is made of, relative to the repository root: a commit that changes one of these
#: paths makes a new template version.
TEMPLATE_PATHS = ("copier.yml", "template")

#: The line of the answers file that records the template version (Copier writes it first).
_RECORDED_LINE = re.compile(r"^_commit:.*$", re.MULTILINE)
_FULL_ID = re.compile(r"[0-9a-f]{40}")


def resolve(root: Path, ref: str) -> str | None:
    """The full id of the commit ``ref`` names in ``root`` (a commit id, abbreviated or not, a branch, ...)."""
    if not ref or ref.startswith("-") or "\n" in ref:
        return None
    result = git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    out = result.stdout.strip()
    return out if result.returncode == 0 and _FULL_ID.fullmatch(out) else None


def template_version(root: Path, ref: str = "HEAD") -> str | None:
    """The last commit up to ``ref`` that changed the template (:data:`TEMPLATE_PATHS`); None if none did."""
    if not ref or ref.startswith("-"):
        return None
    result = git(root, "log", "-1", "--format=%H", ref, "--", *TEMPLATE_PATHS)
    out = result.stdout.strip()
    return out if result.returncode == 0 and _FULL_ID.fullmatch(out) else None


def same_template(root: Path, first: str, second: str) -> bool:
    """Whether the two commits hold the same template: the same ``copier.yml`` and ``template/``."""
    return git(root, "diff", "--quiet", first, second, "--", *TEMPLATE_PATHS).returncode == 0


def is_ancestor(root: Path, older: str, newer: str) -> bool:
    """Whether ``older`` is ``newer`` or in its history."""
    return git(root, "merge-base", "--is-ancestor", older, newer).returncode == 0


def is_shallow(root: Path) -> bool:
    """A shallow clone lacks the history that template versions are found in."""
    return git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"


def uncommitted_template_changes(root: Path) -> list[str]:
    """Changed or new template files that no commit holds yet (``git status`` lines)."""
    status = git(root, "status", "--porcelain", "--untracked-files=all", "--", *TEMPLATE_PATHS).stdout
    return [line for line in status.splitlines() if line.strip()]


def recorded_version(model_dir: Path) -> str | None:
    """The template version a scaffold records (``_commit``), as written; None if it records none."""
    answers = yaml.safe_load((model_dir / ANSWERS_FILE).read_text(encoding="utf-8")) or {}
    value = answers.get("_commit")
    return None if value is None else str(value)


def record_version(model_dir: Path, commit: str) -> bool:
    """Make the scaffold record ``commit`` (a full id): rewrite the ``_commit`` line only; True if it changed.

    The line is written as Copier writes it (YAML, quoted where a bare id would read as a number), so
    Copier's next rendering of the answers file differs from it in that line only.
    """
    if not _FULL_ID.fullmatch(commit):
        raise ValueError(f"not a full commit id: {commit!r}")
    path = model_dir / ANSWERS_FILE
    text = path.read_text(encoding="utf-8")
    line = yaml.safe_dump({"_commit": commit}, default_flow_style=False, width=200).rstrip("\n")
    if _RECORDED_LINE.search(text):
        new = _RECORDED_LINE.sub(lambda _: line, text, count=1)
    else:  # Copier writes _commit first, after its header comment
        lines = text.splitlines(keepends=True)
        at = next((i for i, existing in enumerate(lines) if not existing.startswith("#")), len(lines))
        new = "".join([*lines[:at], line + "\n", *lines[at:]])
    if new == text:
        return False
    path.write_text(new, encoding="utf-8")
    return True


def drifted(root: Path, template: Path | None = None) -> dict[str, str | None]:
    """Scaffolds of ``root`` that do not record the current version of the template in ``template`` (default:
    ``root`` itself): ``models/<m>`` -> what they record.

    Empty when every scaffold is current. Raises ValueError where no commit holds the template.
    """
    template = template or root
    current = template_version(template)
    if current is None:
        raise ValueError(f"no commit of {template} holds the template ({', '.join(TEMPLATE_PATHS)})")
    found = {}
    for model_dir in model_scaffolds(root):
        recorded = recorded_version(model_dir)
        if recorded != current:
            found[model_dir.relative_to(root).as_posix()] = recorded
    return found
