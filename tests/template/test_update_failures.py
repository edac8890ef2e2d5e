"""``scaffold-update`` when Copier or git cannot carry out an update: bad input (2) naming the scaffold, never a
conflict (1) nor a bug (3); the scaffolds after it are not attempted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from copier.errors import UserMessageError

from modelgraft.scaffold.update import EXIT_ERROR

from .test_update import change_template, update

FAILURES = {
    "copier": UserMessageError("the answers file is broken"),
    "git": subprocess.CalledProcessError(128, ["git", "apply"], stderr="fatal: Unable to create index.lock"),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_failed_update_exits_2_naming_the_scaffold_and_the_cause(
    repo_with_scaffolds: Path,
    scaffolded_models: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    failure: str,
) -> None:
    repo = repo_with_scaffolds
    model, other = scaffolded_models
    change_template(repo)

    def fail(*args: object, **kwargs: object) -> None:
        raise FAILURES[failure]

    monkeypatch.setattr("modelgraft.scaffold.update.run_update", fail)

    assert update(repo, f"models/{model}", f"models/{other}") == EXIT_ERROR

    captured = capsys.readouterr()
    assert f"scaffold-update: error: models/{model}: copier update failed: {type(FAILURES[failure]).__name__}" in (
        captured.err
    )
    assert "Traceback" not in captured.err
    assert f"models/{other}: not updated: fix the failure above first" in captured.out
