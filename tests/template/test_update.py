"""Template changes reach every scaffold (``scaffold-update``), and a conflict fails the command.

Each test works in a fresh clone without tags that holds two scaffolds copied at the current template version
and committed (conftest.py's ``repo_with_scaffolds``; the test of a copy makes its own), commits a template
change in the same repository (the template's source is the repository itself: that commit is the new
template version) and updates those scaffolds (the zoo's own models
are scaffolds too, with hand-written parts that this change would conflict with: test_adoption.py and
test_fresh_clone.py update them).
"""

from __future__ import annotations

from pathlib import Path

import copier
import pytest
import yaml

from modelgraft.scaffold.update import EXIT_BUG, EXIT_CONFLICT, EXIT_ERROR, EXIT_OK, main

from .repos import commit_all, copy_model, git, outside_zoo, template_version, upstream_prefix, working_directory

CONFIG_TEMPLATE = "template/{{ model }}_gpu_patch_gen_config.py.jinja"
#: The template change of these tests: a new last line of every GPU config (whatever the template says above it).
TEMPLATE_LINE = "# template v2: a new last line\n"
#: A local edit that conflicts with it: another last line of the scaffold's config.
LOCAL_LINE = "# a local last line\n"


def change_template(repo: Path) -> str:
    """Commit a new last line of the GPU config template; return the new template version (that commit)."""
    append(repo / CONFIG_TEMPLATE, TEMPLATE_LINE)
    commit_all(repo, "template: a new last line of the config")
    version = template_version(repo)
    assert version == git(repo, "rev-parse", "HEAD").strip()
    return version


def append(path: Path, line: str) -> None:
    text = path.read_text(encoding="utf-8")
    path.write_text(text + ("" if text.endswith("\n") else "\n") + line, encoding="utf-8")


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def update(repo: Path, *args: str) -> int:
    with working_directory(repo):
        return main(list(args))


def recorded(model_dir: Path) -> str:
    return str(yaml.safe_load((model_dir / ".copier-answers.yml").read_text(encoding="utf-8"))["_commit"])


def test_template_change_reaches_the_scaffold_and_keeps_local_edits(
    repo_with_scaffolds: Path, scaffolded_models: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    repo = repo_with_scaffolds
    model = scaffolded_models[0]
    v1 = template_version(repo)
    model_dir = repo / "models" / model
    assert recorded(model_dir) == v1
    init = model_dir / "__init__.py"
    append(init, "# kept: a local edit of a file the template change leaves alone\n")
    commit_all(repo, f"{model}: a local edit")
    v2 = change_template(repo)

    assert update(repo, f"models/{model}") == EXIT_OK

    out = capsys.readouterr().out
    assert f"models/{model}: updated (template {v1[:12]} -> {v2[:12]})" in out
    assert (model_dir / f"{model}_gpu_patch_gen_config.py").read_text(encoding="utf-8").endswith(TEMPLATE_LINE)
    assert init.read_text(encoding="utf-8").endswith(
        "# kept: a local edit of a file the template change leaves alone\n"
    )
    assert recorded(model_dir) == v2  # the full id, not Copier's abbreviated `git describe`
    assert git(repo, "ls-files", "--unmerged") == ""

    commit_all(repo, f"{model}: template v2")  # leaves the template alone: the version stays v2
    assert template_version(repo) == v2
    assert update(repo, f"models/{model}") == EXIT_OK  # nothing new: the scaffold is current
    assert f"models/{model}: current (template {v2[:12]})" in capsys.readouterr().out
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


def test_a_copy_as_copier_leaves_it_is_recorded_at_the_template_version(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`copier copy` without tags records HEAD, abbreviated; scaffold-update writes the template version instead.

    The copy is not committed yet: recording renders nothing, so it needs no clean starting point.
    """
    model = outside_zoo("dense")
    git(repo, "commit", "--quiet", "--allow-empty", "-m", "a commit after the template version")
    model_dir = copy_model(repo, model, generate=False, record=False, prefix=upstream_prefix(model))
    copied = recorded(model_dir)
    assert len(copied) < 40 and git(repo, "rev-parse", "HEAD").startswith(copied)
    before = (model_dir / ".copier-answers.yml").read_text(encoding="utf-8")

    assert update(repo, f"models/{model}") == EXIT_OK

    version = template_version(repo)
    assert f"models/{model}: current, recorded as {version} (was '{copied}')" in capsys.readouterr().out
    after = (model_dir / ".copier-answers.yml").read_text(encoding="utf-8")
    assert after == before.replace(f"_commit: {copied}\n", f"_commit: {version}\n").replace(
        f"_commit: '{copied}'\n", f"_commit: {version}\n"
    )
    commit_all(repo, f"add {model}")
    assert update(repo, "--check") == EXIT_OK


@pytest.mark.parametrize(("mode", "trace"), [("inline", "conflict markers"), ("rej", "rejected hunks")])
def test_a_conflict_fails_the_update_and_names_the_model_and_files(
    repo_with_scaffolds: Path,
    scaffolded_models: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    mode: str,
    trace: str,
) -> None:
    repo = repo_with_scaffolds
    model, other = scaffolded_models
    v1 = template_version(repo)
    model_dir = repo / "models" / model
    config = model_dir / f"{model}_gpu_patch_gen_config.py"
    append(config, LOCAL_LINE)
    commit_all(repo, f"{model}: a local last line")
    v2 = change_template(repo)

    assert update(repo, "--conflict", mode, f"models/{model}", f"models/{other}") == EXIT_CONFLICT

    captured = capsys.readouterr()
    assert f"models/{model}: CONFLICT (template {v1[:12]} -> {v2[:12]}); resolve:" in captured.out
    rejected = ".rej" if mode == "rej" else ""
    assert f"  models/{model}/{model}_gpu_patch_gen_config.py{rejected}  ({trace}" in captured.out
    assert f"models/{other}: not updated: resolve and commit the conflict above first" in captured.out
    assert "1 scaffold(s) with conflicts" in captured.err
    assert other not in git(repo, "status", "--porcelain")


# Without tags plain Copier takes HEAD, and its last rendering (of the new template) sees the scaffold it is
# updating as uncommitted changes of the repository: it warns that it folds them into a commit of its own.
@pytest.mark.filterwarnings("ignore::copier.errors.DirtyLocalWarning")
def test_copier_alone_leaves_a_conflict_behind_without_failing(
    repo_with_scaffolds: Path, scaffolded_models: tuple[str, str]
) -> None:
    """Why scaffold-update exists: `copier update` writes the markers and returns normally (exit status 0)."""
    repo = repo_with_scaffolds
    model = scaffolded_models[0]
    model_dir = repo / "models" / model
    config = model_dir / f"{model}_gpu_patch_gen_config.py"
    append(config, LOCAL_LINE)
    commit_all(repo, f"{model}: a local last line")
    change_template(repo)

    with working_directory(repo):
        copier.run_update(f"models/{model}", defaults=True, overwrite=True, unsafe=True, quiet=True)

    assert "<<<<<<< before updating" in config.read_text(encoding="utf-8")


def test_vcs_ref_updates_to_the_template_as_of_that_commit(
    repo_with_scaffolds: Path, scaffolded_models: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--vcs-ref names a commit; the scaffold records the last commit up to it that changed the template."""
    repo = repo_with_scaffolds
    model = scaffolded_models[0]
    model_dir = repo / "models" / model
    v2 = change_template(repo)
    git(repo, "commit", "--quiet", "--allow-empty", "-m", "not a template change")

    assert update(repo, f"models/{model}", "--vcs-ref", "HEAD") == EXIT_OK

    assert recorded(model_dir) == v2
    assert (model_dir / f"{model}_gpu_patch_gen_config.py").read_text(encoding="utf-8").endswith(TEMPLATE_LINE)
    commit_all(repo, f"{model}: updated")
    assert update(repo, f"models/{model}", "--vcs-ref", "main") == EXIT_OK
    assert f"models/{model}: current (template {v2[:12]})" in capsys.readouterr().out


def test_an_unexpected_error_is_a_bug_with_a_traceback(
    repo_with_scaffolds: Path,
    scaffolded_models: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repo = repo_with_scaffolds
    model = scaffolded_models[0]
    change_template(repo)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("modelgraft.scaffold.update.run_update", broken)
    assert update(repo, f"models/{model}") == EXIT_BUG

    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "RuntimeError: a bug" in err
    assert "a bug in scaffold-update" in err


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        ("uncommitted", (), "models/{model}: uncommitted changes; commit or stash them first"),
        ("recorded-a-tag", (), "models/{model}: records template version 'v0.1.0', which this repository lacks"),
        ("recorded-a-tag", (), "record it with `scaffold-update --adopt models/{model}`"),
        ("none", ("--vcs-ref", "v7"), "--vcs-ref v7: no such commit or branch"),
        ("updated", ("--vcs-ref", "HEAD~3"), "which is not in the history of template version"),
        ("none", ("models/ops",), "models/ops is not a scaffold"),
        ("adopt-a-known-version", ("--adopt",), "a commit of this repository with another template"),
    ],
)
def test_nothing_is_changed_on_bad_input(
    repo_with_scaffolds: Path,
    scaffolded_models: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    setup: str,
    args: tuple[str, ...],
    message: str,
) -> None:
    repo = repo_with_scaffolds
    model = scaffolded_models[0]
    model_dir = repo / "models" / model
    v1 = recorded(model_dir)
    change_template(repo)
    if setup == "uncommitted":
        append(model_dir / "__init__.py", "# an uncommitted local edit\n")
    elif setup == "updated":  # to the new template version, committed; HEAD~3 is the first version's tip
        assert update(repo, f"models/{model}") == EXIT_OK
        commit_all(repo, f"{model}: updated")
    elif setup == "recorded-a-tag":
        edit(model_dir / ".copier-answers.yml", f"_commit: {v1}", "_commit: v0.1.0")
        commit_all(repo, f"{model}: answers from a tag, which clones lack")
    before = git(repo, "status", "--porcelain")
    answers = {p: p.read_bytes() for p in repo.glob("models/*/.copier-answers.yml")}

    assert update(repo, *args) == EXIT_ERROR

    err = capsys.readouterr().err
    assert message.format(model=model) in err, err
    assert git(repo, "status", "--porcelain") == before
    assert {p: p.read_bytes() for p in repo.glob("models/*/.copier-answers.yml")} == answers
