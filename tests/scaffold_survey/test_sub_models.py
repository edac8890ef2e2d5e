"""What a composed copy guards through its sub-models: read from its answers and the packages' registrations."""

from __future__ import annotations

from pathlib import Path

from modelgraft.scaffold.survey.classify import guarded_slots, merged_slots, thin_scaffold_note
from modelgraft.scaffold.survey.sub_models import registered_modules, sub_model_modules

TOWER = "if layer_norm_slot.use_non_eager_impl:\n    pass\nif activation_slot.use_non_eager_impl:\n    pass\n"
COPY = "if causal_lm_loss_slot.use_non_eager_impl:\n    pass\n"


def _package(models: Path, name: str, registration: str, module: str = "") -> None:
    folder = models / name
    (folder / "generated").mkdir(parents=True)
    (folder / "__init__.py").write_text(f"from modelgraft.models.registry import register_model\n\n{registration}\n")
    (folder / "generated" / f"patched_modeling_{name}_gpu.py").write_text(module)


def _models(tmp_path: Path) -> Path:
    models = tmp_path / "models"
    _package(
        models,
        "siglip",
        'register_model("siglip_vision_model", modeling={"gpu": "modelgraft.models.siglip.generated.'
        'patched_modeling_siglip_gpu"}, config="transformers.SiglipVisionConfig")',
        TOWER,
    )
    _package(
        models,
        "gemma",
        'register_model("gemma", modeling={"gpu": ".generated.patched_modeling_gemma_gpu"}, config="x.GemmaConfig")',
    )
    _package(models, "paligemma", "", COPY)
    answers = (
        "recipe:\n  composed:\n    sub_models:\n      text_config: gemma\n      vision_config: siglip_vision_model\n"
    )
    (models / "paligemma" / ".copier-answers.yml").write_text(answers)
    return models


def test_registered_modules_map_each_type_to_its_generated_gpu_file(tmp_path: Path) -> None:
    models = _models(tmp_path)
    assert registered_modules(models) == {
        "siglip_vision_model": models / "siglip" / "generated" / "patched_modeling_siglip_gpu.py",
        "gemma": models / "gemma" / "generated" / "patched_modeling_gemma_gpu.py",
    }


def test_a_composed_copy_reaches_the_modules_registered_for_its_sub_models(tmp_path: Path) -> None:
    models = _models(tmp_path)
    assert set(sub_model_modules(models / "paligemma", models)) == {
        models / "gemma" / "generated" / "patched_modeling_gemma_gpu.py",
        models / "siglip" / "generated" / "patched_modeling_siglip_gpu.py",
    }


def test_a_copy_without_composed_sub_models_reaches_no_other_module(tmp_path: Path) -> None:
    models = _models(tmp_path)
    assert sub_model_modules(models / "gemma", models) == ()


def test_a_composed_copy_whose_towers_guard_two_slots_is_not_a_thin_scaffold(tmp_path: Path) -> None:
    models = _models(tmp_path)
    own = guarded_slots(COPY)
    assert thin_scaffold_note(own)
    slots = merged_slots(own, *(guarded_slots(m.read_text()) for m in sub_model_modules(models / "paligemma", models)))
    assert thin_scaffold_note(slots) == ""


def test_a_qwen_vl_copy_built_from_sub_models_reaches_their_modules_too(tmp_path: Path) -> None:
    """glm46v's answers name its sub-models' types at the recipe's top level (its towers are glm4v's)."""
    models = _models(tmp_path)
    answers = "recipe:\n  sub_models:\n    text_config: gemma\n    vision_config: siglip_vision_model\n"
    (models / "paligemma" / ".copier-answers.yml").write_text(answers)
    assert len(sub_model_modules(models / "paligemma", models)) == 2


def test_an_audio_language_model_copy_reaches_its_language_models_module(tmp_path: Path) -> None:
    """An audio language model's answers name its sub-models' types under recipe.audio_lm (its own encoder's type
    is registered by the copy itself, so only the language model's module is another package's)."""
    models = _models(tmp_path)
    answers = "recipe:\n  audio_lm:\n    sub_models:\n      audio_config: glmasr_encoder\n      text_config: gemma\n"
    (models / "paligemma" / ".copier-answers.yml").write_text(answers)
    assert sub_model_modules(models / "paligemma", models) == (
        models / "gemma" / "generated" / "patched_modeling_gemma_gpu.py",
    )
