"""The scaffold tools' one git helper and their one choice of scaffold folders, on small real repositories."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgraft.scaffold.errors import ScaffoldError
from modelgraft.scaffold.folders import ANSWERS_FILE, chosen_scaffolds, model_scaffolds, tracked_scaffolds
from modelgraft.scaffold.git import GitFailed, git, git_output, toplevel


class ToolError(Exception):
    """A tool's own error type, as the survey's SurveyError."""


def repository(tmp_path: Path) -> Path:
    """A repository with a tracked scaffold models/a, an untracked one models/b and a tracked one in tools/c."""
    root = tmp_path / "repo"
    for folder in ("models/a", "models/b", "tools/c"):
        (root / folder).mkdir(parents=True)
        (root / folder / ANSWERS_FILE).write_text("_commit: x\n", encoding="utf-8")
    (root / "models" / "plain").mkdir()
    git_output(root, "init", "--quiet")
    git_output(root, "add", "models/a", "tools/c")
    git_output(root, "commit", "--quiet", "-m", "scaffolds", identity=True)
    return root.resolve()


def test_a_failing_command_raises_the_callers_error_naming_command_and_repository(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=rf"^git rev-parse --verify nope failed in {tmp_path}: "):
        git_output(tmp_path, "rev-parse", "--verify", "nope", error=ToolError)


def test_the_default_error_is_git_failed_and_git_itself_never_raises(tmp_path: Path) -> None:
    assert git(tmp_path, "rev-parse", "--verify", "nope").returncode != 0
    with pytest.raises(GitFailed):
        git_output(tmp_path, "rev-parse", "--verify", "nope")


def test_toplevel_is_the_repository_root_from_any_folder_inside(tmp_path: Path) -> None:
    root = repository(tmp_path)

    assert toplevel(root / "models" / "a") == root


def test_model_scaffolds_are_the_model_packages_with_answers_tracked_or_not(tmp_path: Path) -> None:
    root = repository(tmp_path)

    assert model_scaffolds(root) == [root / "models" / "a", root / "models" / "b"]


def test_tracked_scaffolds_are_every_folder_whose_answers_git_tracks(tmp_path: Path) -> None:
    root = repository(tmp_path)

    assert tracked_scaffolds(root) == [root / "models" / "a", root / "tools" / "c"]


def test_named_scaffolds_replace_every_and_repeat_once(tmp_path: Path) -> None:
    root = repository(tmp_path)
    named = [Path("b"), Path("a"), Path("b")]

    chosen = chosen_scaffolds(root, named, start=root / "models", every=tracked_scaffolds)

    assert chosen == [root / "models" / "b", root / "models" / "a"]


def test_no_name_chooses_every_scaffold_of_the_given_kind(tmp_path: Path) -> None:
    root = repository(tmp_path)

    assert chosen_scaffolds(root, [], start=root, every=model_scaffolds) == model_scaffolds(root)


@pytest.mark.parametrize("folder", ["models/plain", "../elsewhere"])
def test_a_named_folder_that_is_not_a_scaffold_of_the_repository_is_refused(tmp_path: Path, folder: str) -> None:
    root = repository(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / ANSWERS_FILE).write_text("_commit: x\n", encoding="utf-8")

    with pytest.raises(ScaffoldError, match=rf"is not a scaffold of {root} \(no {ANSWERS_FILE}\)"):
        chosen_scaffolds(root, [Path(folder)], start=root, every=model_scaffolds)
