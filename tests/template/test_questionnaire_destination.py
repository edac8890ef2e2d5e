"""The questionnaire's fit reads where the copy goes: a training repository's own model packages register
sub-model types a VLM's fit needs, as this project's packages do (docs/scaffolding.md, "Scaffolding into your own
repository"). Rendered as Copier renders a question's validator: the extension's globals, ``_copier_conf`` in the
context."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from jinja2 import Environment

from modelgraft.scaffold.jinja_extension import ScaffoldExtension, destination_models

#: The validator of the category question, as copier.yml writes it.
VALIDATOR = "{{ scaffold_refusal(model, category) }}"

#: What lfm3_vl's fit says where no package registers its language model's type (transformers 5.25.0).
UNREGISTERED = "text_config's default model_type lfm3 has no generated class"

pytestmark = pytest.mark.upstream_facts


def _training_repository(tmp_path: Path, *, with_lfm3: bool) -> Path:
    """``mytrainer``: a [tool.patchgen] table naming ``models``, and, with ``with_lfm3``, a package registering
    lfm3 there (a scaffold of lfm3 copied in first)."""
    repo = tmp_path / "mytrainer"
    (repo / "models").mkdir(parents=True)
    (repo / "pyproject.toml").write_text('[project]\nname = "mytrainer"\n\n[tool.patchgen]\nroots = ["models"]\n')
    (repo / "models" / "__init__.py").write_text("")
    if with_lfm3:
        (repo / "models" / "lfm3").mkdir()
        (repo / "models" / "lfm3" / "__init__.py").write_text(
            "from modelgraft.models.registry import register_model\n\n"
            'register_model("lfm3", modeling={"gpu": "models.lfm3.generated.patched_modeling_lfm3_gpu"}, '
            'config="transformers.Lfm3Config")\n'
        )
    return repo


class _CopierConf(Mapping[str, Any]):
    """``_copier_conf`` as Copier hands it to Jinja: a mapping that is not a dict (Copier's LazyDict)."""

    def __init__(self, **values: Any) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _validate(dst: Path, model: str, category: str) -> str:
    environment = Environment(extensions=[ScaffoldExtension])
    conf = _CopierConf(dst_path=dst)
    return environment.from_string(VALIDATOR).render(model=model, category=category, _copier_conf=conf)


def test_a_composed_vlm_whose_text_model_the_repository_registers_fits_there(tmp_path: Path) -> None:
    repo = _training_repository(tmp_path, with_lfm3=True)
    assert _validate(repo / "models" / "lfm3_vl", "lfm3_vl", "vlm") == ""


def test_the_same_copy_into_a_repository_without_it_is_refused_naming_the_type(tmp_path: Path) -> None:
    repo = _training_repository(tmp_path, with_lfm3=False)
    assert UNREGISTERED in _validate(repo / "models" / "lfm3_vl", "lfm3_vl", "vlm")


def test_a_text_model_copied_in_after_a_refusal_fits_the_vlm_in_the_same_process(tmp_path: Path) -> None:
    """Copier's API may ask twice in one process: before lfm3's package exists, and after it was copied in."""
    repo = _training_repository(tmp_path, with_lfm3=False)
    assert UNREGISTERED in _validate(repo / "models" / "lfm3_vl", "lfm3_vl", "vlm")
    registering = _training_repository(tmp_path / "with", with_lfm3=True) / "models" / "lfm3"
    shutil.copytree(registering, repo / "models" / "lfm3")
    assert _validate(repo / "models" / "lfm3_vl", "lfm3_vl", "vlm") == ""


def test_this_projects_own_models_folder_adds_no_root(tmp_path: Path) -> None:
    """A copy into modelgraft's own ``models/`` reads this project's packages alone, as before."""
    own = Path(__file__).resolve().parents[2] / "models" / "lfm3_vl"
    assert destination_models(own, "lfm3_vl") == ()
    repo = _training_repository(tmp_path, with_lfm3=False)
    assert destination_models(repo / "models" / "lfm3_vl", "lfm3_vl") == ((repo / "models").resolve(),)


def _fit(dst: Path, model: str, category: str) -> str:
    environment = Environment(extensions=[ScaffoldExtension])
    conf = _CopierConf(dst_path=dst)
    template = "{{ scaffold_fit(model, category).sub_model_packages | join(',') }}"
    return environment.from_string(template).render(model=model, category=category, _copier_conf=conf)


def test_the_package_registering_the_text_models_type_is_the_one_the_vlm_imports(tmp_path: Path) -> None:
    """Nothing else imports a training repository's packages: the VLM's ``__init__`` imports lfm3's first."""
    repo = _training_repository(tmp_path, with_lfm3=True)
    assert _fit(repo / "models" / "lfm3_vl", "lfm3_vl", "vlm") == "lfm3"


def test_a_vlm_over_this_projects_own_types_imports_no_package(tmp_path: Path) -> None:
    """llava_next builds a Llama and a CLIP tower: modelgraft registers both, even where the repository has a
    package registering llama too."""
    repo = _training_repository(tmp_path, with_lfm3=True)
    (repo / "models" / "mine").mkdir()
    (repo / "models" / "mine" / "__init__.py").write_text('register_model("llama", modeling={})\n')
    assert _fit(repo / "models" / "llava_next", "llava_next", "vlm") == ""


def test_an_updates_temporary_render_reads_the_repository_the_command_runs_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copier's update renders the recorded template version outside any repository; the recorded ``package``
    answer and the working directory (the repository root, where ``scaffold-update`` runs Copier) find its
    models."""
    repo = _training_repository(tmp_path, with_lfm3=True)
    rendered = tmp_path / "copier.old_copy" / "models" / "lfm3_vl"
    monkeypatch.chdir(repo)
    assert destination_models(rendered, "lfm3_vl", "models.lfm3_vl") == ((repo / "models").resolve(),)


def test_without_a_recorded_package_a_folder_outside_any_repository_adds_no_root(tmp_path: Path) -> None:
    assert destination_models(tmp_path / "models" / "lfm3_vl", "lfm3_vl") == ()
