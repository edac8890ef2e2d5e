"""What the fits read of this project's model packages, as source: the types they register, the generated module
each names and the slots that module consults (generator/recipes/registered.py)."""

from __future__ import annotations

from pathlib import Path

from modelgraft.generator.recipes.registered import registered_module_file, sub_model_slots

INIT = """from modelgraft.models.registry import register_model

register_model(
    "toy",
    modeling={"gpu": "modelgraft.models.toy.generated.patched_modeling_toy_gpu"},
    config="transformers.ToyConfig",
)
register_model(
    "toy_vision",
    modeling={"gpu": "modelgraft.models.toy.generated.patched_modeling_toy_gpu"},
    config="transformers.ToyVisionConfig",
)
"""

GENERATED = """
def forward(self, x):
    if rms_norm_slot.use_non_eager_impl:
        return rms_norm_slot(x)
    if placeholder_features_slot.use_non_eager_impl:
        return x
    if rope_vision_slot.use_non_eager_impl:
        return x
    if rms_norm_slot.use_non_eager_impl:
        return x
    if causal_lm_loss_slot.use_non_eager_impl:
        return x
"""


def _toy_models(root: Path) -> Path:
    package = root / "toy"
    (package / "generated").mkdir(parents=True)
    (package / "__init__.py").write_text(INIT, encoding="utf-8")
    (package / "generated" / "patched_modeling_toy_gpu.py").write_text(GENERATED, encoding="utf-8")
    return root


def test_a_registered_type_s_generated_file_is_the_gpu_module_its_registration_names(tmp_path: Path) -> None:
    root = _toy_models(tmp_path)
    assert registered_module_file("toy_vision", root) == root / "toy" / "generated" / "patched_modeling_toy_gpu.py"


def test_a_type_nobody_registers_has_no_generated_file(tmp_path: Path) -> None:
    assert registered_module_file("toy_text", _toy_models(tmp_path)) is None


def test_a_sub_model_s_slots_are_those_its_module_consults_less_the_heads_and_the_scatter(tmp_path: Path) -> None:
    """The loss heads and the placeholder scatter belong to the model the module holds, not to its sub-models."""
    assert sub_model_slots("toy_vision", _toy_models(tmp_path)) == ("rms_norm", "rope_vision")


def test_a_type_nobody_registers_has_no_slots_to_count(tmp_path: Path) -> None:
    assert sub_model_slots("toy_text", _toy_models(tmp_path)) is None
