"""Pin-bump tools: reference trees come from wheels via pip; the survey reports signature drift.

Wheels are built here and served to pip from a local folder (--no-index), so
the real download and unpack path runs without reaching any registry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgraft.generator.pinbump import cli
from modelgraft.generator.pinbump.fetch import fetch_reference, reference_root

from .toy import local_pip


def test_fetch_unpacks_the_wheel_sources_under_the_versioned_folder(tmp_path: Path, wheelhouse: Path) -> None:
    root = fetch_reference("9.0.0", workspace=tmp_path / "ws", pip_args=local_pip(wheelhouse))
    assert root == reference_root(tmp_path / "ws", "9.0.0")
    assert "scale=1.0" in (root / "transformers/models/toy/modeling_toy.py").read_text()


def test_fetch_of_a_version_the_registry_lacks_is_an_error_naming_it(tmp_path: Path, wheelhouse: Path) -> None:
    with pytest.raises(Exception, match="transformers==9.9.9"):
        fetch_reference("9.9.9", workspace=tmp_path / "ws", pip_args=local_pip(wheelhouse))


def test_survey_reports_changed_signatures_and_exits_one(project: Path, wheelhouse: Path, capsys) -> None:
    pip = [f"--pip-arg={a}" for a in local_pip(wheelhouse)]
    code = cli.main(["--workspace", str(project / "ws"), *pip, "survey", "9.0.0", "9.1.0"])
    out = capsys.readouterr().out
    assert code == 1
    assert "changed   zoopin.toy.toy_gpu_patch_gen_config ToyModel.forward" in out
    assert "added cache_position" in out
    assert "scale: scale (positional-or-keyword=1.0) -> scale (positional-or-keyword=2.0)" in out


def test_survey_names_the_owner_of_each_changed_target(project: Path, wheelhouse: Path, capsys) -> None:
    pip = [f"--pip-arg={a}" for a in local_pip(wheelhouse)]
    cli.main(["--workspace", str(project / "ws"), *pip, "survey", "9.0.0", "9.1.0"])
    out = capsys.readouterr().out
    forward = next(line for line in out.splitlines() if "ToyModel.forward" in line)
    assert forward.endswith("[config zoopin/toy/toy_gpu_patch_gen_config.py:7]")  # its decorator, forward


def test_survey_leaves_out_methods_the_patches_add(project: Path, wheelhouse: Path, capsys) -> None:
    pip = [f"--pip-arg={a}" for a in local_pip(wheelhouse)]
    cli.main(["--workspace", str(project / "ws"), *pip, "survey", "9.0.0", "9.1.0", "--show-unchanged"])
    assert "dummy_forward" not in capsys.readouterr().out


def test_survey_between_identical_versions_reports_no_drift(project: Path, wheelhouse: Path, capsys) -> None:
    pip = [f"--pip-arg={a}" for a in local_pip(wheelhouse)]
    code = cli.main(["--workspace", str(project / "ws"), *pip, "survey", "9.0.0", "9.0.0"])
    assert code == 0
    assert "no signature drift" in capsys.readouterr().out


# -- exit statuses (generator.entrypoint): 1 drift above, 2 bad input, 3 a bug -----------------------------------


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_an_unknown_config_module_exits_2_naming_it_and_changes_nothing(
    project: Path, wheelhouse: Path, capsys
) -> None:
    pip = [f"--pip-arg={a}" for a in local_pip(wheelhouse)]
    before = _tree(project)

    code = cli.main(["--workspace", str(project / "ws"), *pip, "survey", "9.0.0", "9.1.0", "zoopin.toy.nope"])

    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("patchgen-pin: error: config zoopin.toy.nope: no config file zoopin/toy/nope.py")
    assert _tree(project) == before


def test_a_version_pip_cannot_download_exits_2_naming_it(project: Path, wheelhouse: Path, capsys) -> None:
    pip = [f"--pip-arg={a}" for a in local_pip(wheelhouse)]

    code = cli.main(["--workspace", str(project / "ws"), *pip, "fetch", "9.9.9"])

    assert code == 2
    assert "patchgen-pin: error: target transformers==9.9.9: pip could not download transformers==9.9.9" in (
        capsys.readouterr().err
    )
    assert not (project / "ws" / "hf_reference" / "v9.9.9").exists()


def test_a_bug_in_the_survey_exits_3_with_a_traceback_never_1(
    project: Path, wheelhouse: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> list:
        raise RuntimeError("a bug in the survey")

    monkeypatch.setattr(cli, "survey", broken)
    pip = [f"--pip-arg={a}" for a in local_pip(wheelhouse)]

    code = cli.main(["--workspace", str(project / "ws"), *pip, "survey", "9.0.0", "9.1.0"])

    assert code == 3
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "RuntimeError: a bug in the survey" in err
