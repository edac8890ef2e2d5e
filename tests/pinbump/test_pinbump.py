"""Pin-bump tools: reference trees come from wheels via pip; the survey reports signature drift.

Wheels are built here and served to pip from a local folder (--no-index), so
the real download and unpack path runs without reaching any registry.
"""

from __future__ import annotations

import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from modelgraft.generator.pinbump import cli
from modelgraft.generator.pinbump.fetch import fetch_reference, reference_root

TOY_V1 = """
class ToyModel:
    def forward(self, input_ids, attention_mask=None):
        return input_ids


def helper(x, scale=1.0):
    return x
"""

TOY_V2 = """
class ToyModel:
    def forward(self, input_ids, attention_mask=None, cache_position=None):
        return input_ids


def helper(x, scale=2.0):
    return x
"""


def build_wheel(folder: Path, version: str, modeling: str) -> Path:
    """A minimal, valid wheel of a package called ``transformers``."""
    path = folder / f"transformers-{version}-py3-none-any.whl"
    info = f"transformers-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("transformers/__init__.py", f'__version__ = "{version}"\n')
        wheel.writestr("transformers/models/__init__.py", "")
        wheel.writestr("transformers/models/toy/__init__.py", "")
        wheel.writestr("transformers/models/toy/modeling_toy.py", textwrap.dedent(modeling))
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: transformers\nVersion: {version}\n")
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    house = tmp_path / "wheelhouse"
    house.mkdir()
    build_wheel(house, "9.0.0", TOY_V1)
    build_wheel(house, "9.1.0", TOY_V2)
    return house


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    (root / "zoopin" / "toy").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.patchgen]\nroots = ["zoopin"]\n')
    (root / "zoopin" / "__init__.py").write_text("")
    (root / "zoopin" / "toy" / "__init__.py").write_text("")
    (root / "zoopin" / "toy" / "toy_gpu_patch_gen_config.py").write_text(
        textwrap.dedent(
            """
            from modelgraft.generator import PatchConfig

            config = PatchConfig("transformers.models.toy.modeling_toy", "patched_modeling_toy_gpu.py")


            @config.override_method("ToyModel.forward")
            def forward(self, input_ids, attention_mask=None):
                return input_ids


            @config.replace_function("helper")
            def helper(x, scale=1.0):
                return x


            @config.override_method("ToyModel.dummy_forward", add=True)
            def dummy_forward(self):
                return None
            """
        )
    )
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in [m for m in sys.modules if m == "zoopin" or m.startswith("zoopin.")]:
        del sys.modules[name]


def local_pip(wheelhouse: Path) -> tuple[str, ...]:
    return ("--no-index", f"--find-links={wheelhouse}")


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
