"""The questionnaire's fit reads where the copy goes: a training repository's own model packages register
sub-model types a VLM's fit needs, as this project's packages do (docs/scaffolding.md, "Scaffolding into your own
repository"). Rendered as Copier renders a question's validator: the extension's globals, ``_copier_conf`` in the
context."""

from __future__ import annotations

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


def test_this_projects_own_models_folder_adds_no_root(tmp_path: Path) -> None:
    """A copy into modelgraft's own ``models/`` reads this project's packages alone, as before."""
    own = Path(__file__).resolve().parents[2] / "models" / "lfm3_vl"
    assert destination_models(own, "lfm3_vl") == ()
    repo = _training_repository(tmp_path, with_lfm3=False)
    assert destination_models(repo / "models" / "lfm3_vl", "lfm3_vl") == ((repo / "models").resolve(),)
