"""Template changes reach every scaffold (``scaffold-update``), and a conflict fails the command.

Each test copies scaffolds at template v0.1.0, commits them, commits a template change tagged v0.2.0 in
the same repository (the template's source is the repository itself), and updates the scaffolds it made
(the zoo's own models are scaffolds too, with hand-written parts that this change would conflict with:
test_adoption.py updates them).
"""

from __future__ import annotations

from pathlib import Path

import copier
import pytest
import yaml

from scaffold.update import EXIT_CONFLICT, EXIT_ERROR, EXIT_OK, main

from .repos import commit_all, copy_model, git, tag, working_directory

CONFIG_TEMPLATE = "template/{{ model }}_gpu_patch_gen_config.py.jinja"
DOCSTRING = "op-slot guards and the fused-loss heads."
DOCSTRING_V2 = "op-slot guards and the fused-loss heads (template v0.2.0)."


def scaffold(repo: Path, model: str, prefix: str) -> Path:
    """A committed scaffold, copied from the latest template version."""
    model_dir = copy_model(repo, model, generate=False, prefix=prefix)
    commit_all(repo, f"add {model}")
    return model_dir


def change_template(repo: Path, version: str | None = "v0.2.0") -> None:
    """Commit a new docstring in the GPU config template, tagged ``version`` (untagged if None)."""
    path = repo / CONFIG_TEMPLATE
    path.write_text(path.read_text(encoding="utf-8").replace(DOCSTRING, DOCSTRING_V2), encoding="utf-8")
    commit_all(repo, "template: a new config docstring")
    if version:
        tag(repo, version)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def update(repo: Path, *args: str) -> int:
    with working_directory(repo):
        return main(list(args))


def template_version(model_dir: Path) -> str:
    return yaml.safe_load((model_dir / ".copier-answers.yml").read_text(encoding="utf-8"))["_commit"]


def test_template_change_reaches_the_scaffold_and_keeps_local_edits(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_dir = scaffold(repo, "mistral", "Mistral")
    parity = model_dir / "tests" / "test_mistral_parity.py"
    classifier = '    sequence_classification="MistralForSequenceClassification",\n'
    edit(parity, classifier, classifier + '    sizes={"sliding_window": 3},\n')
    commit_all(repo, "mistral: a tiny sliding window")
    change_template(repo)

    assert update(repo, "models/mistral") == EXIT_OK

    out = capsys.readouterr().out
    assert "models/mistral: updated (template v0.1.0 -> v0.2.0)" in out
    assert DOCSTRING_V2 in (model_dir / "mistral_gpu_patch_gen_config.py").read_text(encoding="utf-8")
    assert 'sizes={"sliding_window": 3},' in parity.read_text(encoding="utf-8")
    assert template_version(model_dir) == "v0.2.0"
    assert git(repo, "ls-files", "--unmerged") == ""

    commit_all(repo, "mistral: template v0.2.0")
    assert update(repo, "models/mistral") == EXIT_OK  # nothing new: the scaffold is current
    assert "models/mistral: current (template v0.2.0)" in capsys.readouterr().out


@pytest.mark.parametrize(("mode", "trace"), [("inline", "conflict markers"), ("rej", "rejected hunks")])
def test_a_conflict_fails_the_update_and_names_the_model_and_files(
    repo: Path, capsys: pytest.CaptureFixture[str], mode: str, trace: str
) -> None:
    model_dir = scaffold(repo, "mistral", "Mistral")
    scaffold(repo, "smollm3", "SmolLM3")
    config = model_dir / "mistral_gpu_patch_gen_config.py"
    edit(config, DOCSTRING, "op-slot guards, the fused-loss heads and a local edit.")
    commit_all(repo, "mistral: a local edit of the docstring")
    change_template(repo)

    assert update(repo, "--conflict", mode, "models/mistral", "models/smollm3") == EXIT_CONFLICT

    captured = capsys.readouterr()
    assert "models/mistral: CONFLICT (template v0.1.0 -> v0.2.0); resolve:" in captured.out
    rejected = ".rej" if mode == "rej" else ""
    assert f"  models/mistral/mistral_gpu_patch_gen_config.py{rejected}  ({trace}" in captured.out
    assert "models/smollm3: not updated: resolve and commit the conflict above first" in captured.out
    assert "1 scaffold(s) with conflicts" in captured.err
    assert "smollm3" not in git(repo, "status", "--porcelain")


def test_copier_alone_leaves_a_conflict_behind_without_failing(repo: Path) -> None:
    """Why scaffold-update exists: `copier update` writes the markers and returns normally (exit status 0)."""
    model_dir = scaffold(repo, "mistral", "Mistral")
    config = model_dir / "mistral_gpu_patch_gen_config.py"
    edit(config, DOCSTRING, "op-slot guards, the fused-loss heads and a local edit.")
    commit_all(repo, "mistral: a local edit of the docstring")
    change_template(repo)

    with working_directory(repo):
        copier.run_update("models/mistral", defaults=True, overwrite=True, unsafe=True, quiet=True)

    assert "<<<<<<< before updating" in config.read_text(encoding="utf-8")


def test_vcs_ref_updates_to_an_untagged_commit_that_later_updates_can_find(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--vcs-ref HEAD is resolved to a commit id, so the recorded version is never Copier's throwaway commit."""
    model_dir = scaffold(repo, "mistral", "Mistral")
    change_template(repo, version=None)
    head = git(repo, "rev-parse", "--short", "HEAD").strip()

    assert update(repo, "models/mistral", "--vcs-ref", "HEAD") == EXIT_OK

    assert template_version(model_dir) == f"v0.1.0-2-g{head}"
    assert DOCSTRING_V2 in (model_dir / "mistral_gpu_patch_gen_config.py").read_text(encoding="utf-8")
    commit_all(repo, "mistral: updated")
    assert update(repo, "models/mistral", "--vcs-ref", "HEAD") == EXIT_OK  # HEAD is now that commit
    assert f"models/mistral: updated (template v0.1.0-2-g{head} -> v0.1.0-3-g" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        ("untagged", (), "the repository has no version tag"),
        ("uncommitted", (), "models/mistral: uncommitted changes; commit or stash them first"),
        ("copied-from-nowhere", (), "models/mistral: copied from template version 'v9.9.9', which this repository"),
        ("none", ("--vcs-ref", "v7"), "--vcs-ref v7: no such tag or commit"),
        ("none", ("models/ops",), "models/ops is not a scaffold"),
    ],
)
def test_nothing_is_updated_on_bad_input(
    repo: Path, capsys: pytest.CaptureFixture[str], setup: str, args: tuple[str, ...], message: str
) -> None:
    model_dir = scaffold(repo, "mistral", "Mistral")
    change_template(repo)
    if setup == "untagged":
        git(repo, "tag", "--delete", "v0.1.0", "v0.2.0")
    elif setup == "uncommitted":
        edit(model_dir / "__init__.py", "register_model(", "register_model(  # a local edit\n    ")
    elif setup == "copied-from-nowhere":
        edit(model_dir / ".copier-answers.yml", "_commit: v0.1.0", "_commit: v9.9.9")
        commit_all(repo, "mistral: answers from a template version the repository lacks")
    before = git(repo, "status", "--porcelain")

    assert update(repo, *args) == EXIT_ERROR

    assert message in capsys.readouterr().err
    assert git(repo, "status", "--porcelain") == before
    assert template_version(model_dir) in {"v0.1.0", "v9.9.9"}
