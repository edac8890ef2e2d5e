"""Template drift: every zoo scaffold records the current template version, as a full commit id.

The current template version is the last commit of this repository's history that changed ``copier.yml``
or ``template/``; git tags do not travel with clones, so nothing here reads one. After a template change
(commit A) this test fails until ``scaffold-update`` has brought the zoo to A and the updated scaffolds
are committed (commit B, which leaves the template alone, so the version stays A).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from modelgraft.scaffold import versions

from .repos import REPO_ROOT, template_version


def _history_or_skip() -> None:
    top = versions.git(REPO_ROOT, "rev-parse", "--show-toplevel")
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != REPO_ROOT:
        pytest.skip(f"{REPO_ROOT} is not the root of a git repository: no template history to check against")
    if versions.is_shallow(REPO_ROOT):
        pytest.skip("a shallow clone lacks the template's history (git fetch --unshallow)")


def test_every_zoo_scaffold_records_the_current_template_version() -> None:
    _history_or_skip()
    current = template_version(REPO_ROOT)
    # scaffold-update finds the same version (it updates to it and --check compares with it).
    assert versions.template_version(REPO_ROOT) == current

    stale = {}
    for answers in sorted(REPO_ROOT.glob("models/*/.copier-answers.yml")):
        recorded = yaml.safe_load(answers.read_text(encoding="utf-8")).get("_commit")
        if str(recorded) != current:
            stale[answers.parent.name] = recorded
    assert not stale, (
        f"the template changed (current version {current}, the last commit that changed copier.yml or "
        f"template/), and these scaffolds record another: {stale}. Run scaffold-update, then generate-all and "
        "the tests, and commit the updated scaffolds without template changes in the same commit "
        "(docs/scaffolding.md, 'Which template version')"
    )
    assert versions.drifted(REPO_ROOT) == {}


def _answers(tmp_path: Path, commit_line: str) -> Path:
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / ".copier-answers.yml").write_text(
        f"# Changes here will be overwritten by Copier; NEVER EDIT MANUALLY\n{commit_line}_src_path: .\nmodel: m\n",
        encoding="utf-8",
    )
    return model_dir


@pytest.mark.parametrize(
    ("commit_line", "commit", "written"),
    [
        (
            "_commit: v0.1.0\n",
            "9fedcccdab305b561f3e82ec95b88fe18f0eed1f",
            "_commit: 9fedcccdab305b561f3e82ec95b88fe18f0eed1f",
        ),
        ("_commit: '2345905'\n", "1" * 40, "_commit: '" + "1" * 40 + "'"),  # YAML would read a bare one as a number
        ("", "0123456789abcdef0123456789abcdef01234567", "_commit: 0123456789abcdef0123456789abcdef01234567"),
    ],
)
def test_recording_a_version_rewrites_the_commit_line_only(
    tmp_path: Path, commit_line: str, commit: str, written: str
) -> None:
    model_dir = _answers(tmp_path, commit_line)

    assert versions.record_version(model_dir, commit)

    text = (model_dir / ".copier-answers.yml").read_text(encoding="utf-8")
    assert text.splitlines() == [
        "# Changes here will be overwritten by Copier; NEVER EDIT MANUALLY",
        written,
        "_src_path: .",
        "model: m",
    ]
    assert versions.recorded_version(model_dir) == commit
    assert not versions.record_version(model_dir, commit)  # already recorded: the file is left alone
    with pytest.raises(ValueError, match="not a full commit id"):
        versions.record_version(model_dir, commit[:7])
