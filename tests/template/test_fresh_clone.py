"""The zoo's scaffolds update in a fresh clone without tags, with plain Copier and with ``scaffold-update``.

Once every zoo scaffold recorded a tag (``v0.1.0``) that no clone has, so no update could start.
Each test here works in a ``git clone --no-tags`` of a repository holding this checkout, whose zoo records
the current template version (a commit id), from the repository root, as the docs tell a user to. The
tests that run Copier update scaffolds they copy (test_adoption.py updates the zoo's own).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import copier
import pytest
import yaml

from modelgraft.scaffold import versions
from modelgraft.scaffold.update import EXIT_ERROR, EXIT_OK, main

from .repos import commit_all, git, run, template_version, working_directory

ZOO = ("gemma3", "llama", "qwen2", "qwen3", "qwen3_moe", "seed_oss")
CONFIG_TEMPLATE = "template/{{ model }}_gpu_patch_gen_config.py.jinja"
TEMPLATE_LINE = "# template v2: a new last line\n"


def _update(repo: Path, *args: str) -> int:
    with working_directory(repo):
        return main(list(args))


def _recorded(repo: Path, model: str) -> str:
    answers = (repo / "models" / model / ".copier-answers.yml").read_text(encoding="utf-8")
    return str(yaml.safe_load(answers)["_commit"])


def _changed(repo: Path) -> list[str]:
    return sorted(line[3:] for line in git(repo, "status", "--porcelain", "--untracked-files=all").splitlines())


def _commit_lines(repo: Path) -> list[str]:
    """The lines that the working tree changes (``git diff``), without the file headers."""
    diff = git(repo, "diff", "--unified=0").splitlines()
    return [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def _copier(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The `copier` command line (of this environment), as a user runs it from the repository root."""
    return run(repo, "-m", "copier", *args)


def test_a_fresh_clone_has_no_tags_and_its_zoo_records_the_template_version(repo: Path) -> None:
    assert git(repo, "tag", "--list") == ""
    version = template_version(repo)
    assert {model: _recorded(repo, model) for model in ZOO} == dict.fromkeys(ZOO, version)
    assert versions.drifted(repo) == {}
    assert _update(repo, "--check") == EXIT_OK


def test_scaffold_update_in_a_fresh_clone_where_everything_is_current_changes_nothing(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = git(repo, "rev-parse", "HEAD")

    assert _update(repo) == EXIT_OK

    out = capsys.readouterr().out
    for model in ZOO:
        assert f"models/{model}: current (template {template_version(repo)[:12]})" in out
    assert _changed(repo) == []
    assert git(repo, "rev-parse", "HEAD") == head


def test_plain_copier_update_cli_works_without_tags(
    repo_with_scaffolds: Path, scaffolded_models: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`copier update --trust --defaults models/<m>`: Copier finds no tag, takes HEAD and records it abbreviated.

    With `--vcs-ref <template version>` it records that commit, abbreviated. Either way only the `_commit`
    line changes (the template is the same), and scaffold-update writes the full id back.
    """
    repo = repo_with_scaffolds
    plain_model, pinned_model = scaffolded_models
    version = template_version(repo)
    head = git(repo, "rev-parse", "HEAD").strip()

    plain = _copier(repo, "update", "--trust", "--defaults", f"models/{plain_model}")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "No git tags found in template; using HEAD as ref" in plain.stderr
    pinned = _copier(repo, "update", "--trust", "--defaults", "--vcs-ref", version, f"models/{pinned_model}")
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr

    assert _changed(repo) == sorted(f"models/{model}/.copier-answers.yml" for model in scaffolded_models)
    lines = _commit_lines(repo)
    assert len(lines) == 4 and all(line[1:].startswith("_commit: ") for line in lines), lines
    assert head.startswith(_recorded(repo, plain_model)) and len(_recorded(repo, plain_model)) < 40
    assert version.startswith(_recorded(repo, pinned_model)) and len(_recorded(repo, pinned_model)) < 40

    assert _update(repo, f"models/{plain_model}", f"models/{pinned_model}") == EXIT_OK
    assert f"models/{plain_model}: current, recorded as {version}" in capsys.readouterr().out
    assert _changed(repo) == []


# Without tags Copier takes HEAD, and its last rendering (of the new template) sees the scaffold it is
# updating as uncommitted changes of the repository: it warns that it folds them into a commit of its own.
@pytest.mark.filterwarnings("ignore::copier.errors.DirtyLocalWarning")
def test_plain_copier_update_carries_a_template_change(
    repo_with_scaffolds: Path, scaffolded_models: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    repo = repo_with_scaffolds
    model = scaffolded_models[0]
    model_dir = repo / "models" / model
    template = repo / CONFIG_TEMPLATE
    template.write_text(template.read_text(encoding="utf-8") + TEMPLATE_LINE, encoding="utf-8")
    commit_all(repo, "template: a new last line of the config")
    version = template_version(repo)

    with working_directory(repo):
        copier.run_update(f"models/{model}", defaults=True, overwrite=True, unsafe=True, quiet=True)

    assert (model_dir / f"{model}_gpu_patch_gen_config.py").read_text(encoding="utf-8").endswith(TEMPLATE_LINE)
    assert version.startswith(_recorded(repo, model))  # HEAD: the template change, abbreviated
    assert _changed(repo) == [f"models/{model}/.copier-answers.yml", f"models/{model}/{model}_gpu_patch_gen_config.py"]

    # The update is done; scaffold-update records its full id (no clean tree needed for that).
    assert _update(repo, f"models/{model}") == EXIT_OK
    assert f"models/{model}: current, recorded as {version}" in capsys.readouterr().out
    assert _recorded(repo, model) == version


def test_scaffolds_recording_a_tag_are_refused_then_adopted(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The zoo as it was before template versions were commit ids: `_commit: v0.1.0`, a tag no clone has. `--adopt` migrates it."""
    version = template_version(repo)
    for model in ZOO:
        answers = repo / "models" / model / ".copier-answers.yml"
        answers.write_text(answers.read_text(encoding="utf-8").replace(version, "v0.1.0"), encoding="utf-8")
    commit_all(repo, "the zoo records a tag")
    assert _update(repo, "--check") != EXIT_OK

    assert _update(repo) == EXIT_ERROR
    err = capsys.readouterr().err
    for model in ZOO:
        assert f"models/{model}: records template version 'v0.1.0', which this repository lacks" in err
    assert _changed(repo) == []

    assert _update(repo, "--adopt") == EXIT_OK

    out = capsys.readouterr().out
    for model in ZOO:
        assert f"models/{model}: adopted at template {version} (recorded 'v0.1.0')" in out
    assert _changed(repo) == [f"models/{model}/.copier-answers.yml" for model in ZOO]
    lines = _commit_lines(repo)
    assert sorted(set(lines)) == [f"+_commit: {version}", "-_commit: v0.1.0"] and len(lines) == 2 * len(ZOO)
    commit_all(repo, "the zoo adopted at the template version")
    assert _update(repo, "--check") == EXIT_OK
    assert _update(repo) == EXIT_OK
    assert _changed(repo) == []


def test_scaffold_update_runs_from_anywhere_in_the_clone(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Copier reads `_src_path: .` against the working directory; scaffold-update moves to the root first."""
    assert _update(repo / "models" / "llama", ".") == EXIT_OK
    assert f"models/llama: current (template {template_version(repo)[:12]})" in capsys.readouterr().out
