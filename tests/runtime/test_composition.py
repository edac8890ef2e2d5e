"""``build_sub_model`` builds a composed model's sub-models from generated classes, or refuses by name.

The cases that need no VLM: the class chosen for a registered type, and each way a sub-config is refused
(a type nobody registered, a type upstream's ``AutoModel`` has no class for, a registered module missing the
class). Gemma3's VLM test covers the composition inside a whole model.
"""

from __future__ import annotations

import pytest
from transformers import CLIPVisionConfig, PretrainedConfig, Qwen2_5_VLVisionConfig, SiglipVisionConfig

from modelgraft.models.composition import SubModelError, build_sub_model, sub_model_class
from modelgraft.models.registry import MODELING_REGISTRY, register_model, unregister_model


def test_a_registered_vision_type_resolves_to_the_generated_class_upstream_names() -> None:
    cls = sub_model_class(SiglipVisionConfig())
    assert cls is MODELING_REGISTRY.get_class("siglip_vision_model", "SiglipVisionModel")
    assert cls.__module__.startswith("modelgraft.models.siglip.")


def test_a_sub_type_of_a_qwen_vl_package_resolves_to_that_package_s_generated_tower() -> None:
    """qwen2_5_vl registers qwen2_5_vl_vision (hyperclovax_vision_v2's default tower) for its generated module."""
    cls = sub_model_class(Qwen2_5_VLVisionConfig())
    assert cls is MODELING_REGISTRY.get_class("qwen2_5_vl", "Qwen2_5_VisionTransformerPretrainedModel")
    assert cls.__module__.startswith("modelgraft.models.qwen2_5_vl.")


def test_build_sub_model_builds_that_class_from_the_config() -> None:
    config = CLIPVisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2)
    model = build_sub_model(config)
    assert type(model) is sub_model_class(config)
    assert model.config.hidden_size == 16


def test_an_unregistered_type_is_refused_naming_it_and_the_way_to_add_it() -> None:
    config = SiglipVisionConfig()
    config.model_type = "aimv2_vision_model"
    with pytest.raises(SubModelError, match=r"'aimv2_vision_model'.*Aimv2VisionModel.*Adding an encoder"):
        sub_model_class(config)


def test_a_type_upstream_automodel_has_no_class_for_is_refused() -> None:
    class Unknown(PretrainedConfig):
        model_type = "no_such_sub_model"

    with pytest.raises(SubModelError, match="AutoModel has no class"):
        sub_model_class(Unknown())


def test_a_registered_module_without_upstream_s_class_is_refused_naming_the_class() -> None:
    # aimv2_vision_model is not in the library: register it against a module that has no Aimv2VisionModel.
    register_model(
        "aimv2_vision_model",
        modeling={"gpu": "modelgraft.models.siglip.generated.patched_modeling_siglip_gpu"},
        config="transformers.Aimv2VisionConfig",
    )
    try:
        config = SiglipVisionConfig()
        config.model_type = "aimv2_vision_model"
        with pytest.raises(SubModelError, match="has no class Aimv2VisionModel"):
            sub_model_class(config)
    finally:
        unregister_model("aimv2_vision_model")


def test_an_unknown_backend_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        sub_model_class(SiglipVisionConfig(), backend="tpu")
