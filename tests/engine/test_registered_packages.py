"""What the fits read of this project's model packages, as source: the types they register, the generated module
each names and the slots a class of that module consults (generator/recipes/registered.py)."""

from __future__ import annotations

from pathlib import Path

from modelgraft.generator.recipes.registered import (
    registered_module_file,
    registered_packages,
    registering_packages,
    sub_model_slots,
)

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

#: A toy generated module: a tower whose block calls a guarded rotary function, a text model, and the head.
GENERATED = """
def apply_rotary_pos_emb_vision(q):
    if rope_vision_slot.use_non_eager_impl:
        return rope_vision_slot(q)
    return q


class ToyPreTrainedModel(PreTrainedModel):
    pass


class ToyVisionBlock(nn.Module):
    def forward(self, x):
        if rms_norm_slot.use_non_eager_impl:
            x = rms_norm_slot(x)
        return apply_rotary_pos_emb_vision(x)


class ToyVisionModel(ToyPreTrainedModel):
    def __init__(self, config):
        self.blocks = nn.ModuleList([ToyVisionBlock() for _ in range(2)])


class ToyTextModel(ToyPreTrainedModel):
    def forward(self, x):
        if glu_activation_slot.use_non_eager_impl:
            return x


class ToyForConditionalGeneration(ToyPreTrainedModel):
    def __init__(self, config):
        self.visual = ToyVisionModel._from_config(config.vision_config)
        self.language_model = ToyTextModel._from_config(config.text_config)

    def forward(self, x):
        if placeholder_features_slot.use_non_eager_impl:
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


def test_a_sub_model_consults_the_slots_of_what_it_builds_and_of_the_functions_they_call(tmp_path: Path) -> None:
    """The blocks' norm and their rotary function; not the text model's MLP, the head's loss nor its scatter."""
    assert sub_model_slots("toy_vision", "ToyVisionModel", _toy_models(tmp_path)) == ("rope_vision", "rms_norm")


def test_a_type_nobody_registers_has_no_slots_to_count(tmp_path: Path) -> None:
    assert sub_model_slots("toy_text", "ToyTextModel", _toy_models(tmp_path)) is None


def test_a_class_the_registered_module_lacks_has_no_slots_to_count(tmp_path: Path) -> None:
    assert sub_model_slots("toy_vision", "ToyAudioModel", _toy_models(tmp_path)) is None


def test_each_registered_type_is_read_with_the_package_registering_it(tmp_path: Path) -> None:
    assert registered_packages(_toy_models(tmp_path)) == {"toy": "toy", "toy_vision": "toy"}


def test_a_type_only_a_training_repository_registers_names_its_package_there(tmp_path: Path) -> None:
    """A VLM over such a type imports that package first: nothing else would register it."""
    assert registering_packages(["toy_vision"], (_toy_models(tmp_path),)) == ("toy",)


def test_a_type_this_project_registers_needs_no_package_of_the_repository(tmp_path: Path) -> None:
    """modelgraft imports its own packages with ``modelgraft.models``; a repository's namesake is not imported."""
    root = tmp_path / "models"
    (root / "llama").mkdir(parents=True)
    (root / "llama" / "__init__.py").write_text('register_model("llama", modeling={})\n', encoding="utf-8")
    assert registering_packages(["llama"], (root,)) == ()


def test_a_type_nobody_registers_names_no_package(tmp_path: Path) -> None:
    assert registering_packages(["toy_audio"], (_toy_models(tmp_path),)) == ()
