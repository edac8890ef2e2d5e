"""The model registries: registration, lazy lookup, and errors that say what is registered."""

from __future__ import annotations

import sys

import pytest

from modelgraft.models.registry import (
    MODEL_CONFIG_REGISTRY,
    MODEL_PROCESSOR_REGISTRY,
    MODELING_REGISTRY,
    RegistryError,
    UnknownEntryError,
    register_model,
    resolve_dotted,
    unregister_model,
)
from modelgraft.models.testing import registered_model

MODEL_TYPE = "runtime_test_model"
LLAMA_MODELING = "transformers.models.llama.modeling_llama"
MISTRAL_MODELING = "transformers.models.mistral.modeling_mistral"


def test_register_model_fills_all_three_registries() -> None:
    with registered_model(
        MODEL_TYPE,
        modeling={"gpu": LLAMA_MODELING, "npu": MISTRAL_MODELING},
        config="transformers.LlamaConfig",
        processor="transformers.PreTrainedTokenizerFast",
    ):
        assert MODEL_TYPE in MODELING_REGISTRY
        assert MODEL_TYPE in MODEL_CONFIG_REGISTRY
        assert MODEL_TYPE in MODEL_PROCESSOR_REGISTRY
        assert MODEL_TYPE in list(MODELING_REGISTRY)
        assert MODELING_REGISTRY.backends(MODEL_TYPE) == ("gpu", "npu")


def test_every_backend_is_served_by_the_gpu_module_unless_it_has_its_own() -> None:
    with registered_model(MODEL_TYPE, modeling={"gpu": LLAMA_MODELING}, config="transformers.LlamaConfig"):
        assert MODELING_REGISTRY.module_path(MODEL_TYPE, "npu") == LLAMA_MODELING
        assert MODELING_REGISTRY.backends(MODEL_TYPE) == ("gpu",)


def test_a_backend_with_code_of_its_own_gets_its_own_module() -> None:
    with registered_model(
        MODEL_TYPE, modeling={"gpu": LLAMA_MODELING, "npu": MISTRAL_MODELING}, config="transformers.LlamaConfig"
    ):
        assert MODELING_REGISTRY.module_path(MODEL_TYPE, "npu") == MISTRAL_MODELING
        assert MODELING_REGISTRY.module_path(MODEL_TYPE, "gpu") == LLAMA_MODELING


def test_processor_is_optional() -> None:
    with registered_model(MODEL_TYPE, modeling={"gpu": LLAMA_MODELING}, config="transformers.LlamaConfig"):
        assert MODEL_TYPE in MODELING_REGISTRY
        assert MODEL_TYPE not in MODEL_PROCESSOR_REGISTRY


def test_registration_imports_nothing() -> None:
    missing = "runtime_test_no_such_package.generated.patched_modeling_x_gpu"
    with registered_model(MODEL_TYPE, modeling={"gpu": missing}, config="runtime_test_no_such_package.XConfig"):
        assert MODELING_REGISTRY.module_path(MODEL_TYPE) == missing
        assert "runtime_test_no_such_package" not in sys.modules
        with pytest.raises(ImportError, match="runtime_test_no_such_package"):
            MODELING_REGISTRY.get_module(MODEL_TYPE)


def test_get_class_returns_the_class_from_the_backend_module() -> None:
    from transformers.models.llama import modeling_llama

    with registered_model(MODEL_TYPE, modeling={"gpu": LLAMA_MODELING}, config="transformers.LlamaConfig"):
        assert MODELING_REGISTRY.get_class(MODEL_TYPE, "LlamaForCausalLM") is modeling_llama.LlamaForCausalLM


def test_config_registry_resolves_top_level_and_module_paths() -> None:
    from transformers.models.llama.configuration_llama import LlamaConfig

    with registered_model(MODEL_TYPE, modeling={"gpu": LLAMA_MODELING}, config="transformers.LlamaConfig"):
        assert MODEL_CONFIG_REGISTRY[MODEL_TYPE] is LlamaConfig
    with registered_model(
        MODEL_TYPE,
        modeling={"gpu": LLAMA_MODELING},
        config="transformers.models.llama.configuration_llama.LlamaConfig",
    ):
        assert MODEL_CONFIG_REGISTRY[MODEL_TYPE] is LlamaConfig


def test_duplicate_registration_is_an_error_and_changes_nothing() -> None:
    with registered_model(MODEL_TYPE, modeling={"gpu": LLAMA_MODELING}, config="transformers.LlamaConfig"):
        with pytest.raises(RegistryError, match="already registered"):
            register_model(
                MODEL_TYPE,
                modeling={"gpu": "transformers.models.qwen3.modeling_qwen3"},
                config="transformers.Qwen3Config",
                processor="transformers.PreTrainedTokenizerFast",
            )
        assert MODELING_REGISTRY.module_path(MODEL_TYPE) == LLAMA_MODELING
        assert MODEL_CONFIG_REGISTRY.path(MODEL_TYPE) == "transformers.LlamaConfig"
        assert MODEL_TYPE not in MODEL_PROCESSOR_REGISTRY


def test_unknown_model_type_error_lists_registered_types() -> None:
    with (
        registered_model(MODEL_TYPE, modeling={"gpu": LLAMA_MODELING}, config="transformers.LlamaConfig"),
        pytest.raises(UnknownEntryError, match=rf"'no_such_model'.*{MODEL_TYPE}") as caught,
    ):
        MODELING_REGISTRY.get_class("no_such_model", "X")
    assert isinstance(caught.value, KeyError)
    with pytest.raises(UnknownEntryError, match="MODEL_CONFIG_REGISTRY"):
        MODEL_CONFIG_REGISTRY["no_such_model"]


def test_unknown_backend_error_lists_the_known_backends() -> None:
    with (
        registered_model(MODEL_TYPE, modeling={"gpu": LLAMA_MODELING}, config="transformers.LlamaConfig"),
        pytest.raises(UnknownEntryError, match=r"unknown backend 'tpu' \(known: gpu, npu\)"),
    ):
        MODELING_REGISTRY.get_class(MODEL_TYPE, "LlamaForCausalLM", backend="tpu")


def test_unknown_architecture_error_lists_module_classes() -> None:
    with (
        registered_model(MODEL_TYPE, modeling={"gpu": LLAMA_MODELING}, config="transformers.LlamaConfig"),
        pytest.raises(UnknownEntryError, match=r"no class 'LlamaForNothing'.*LlamaForCausalLM"),
    ):
        MODELING_REGISTRY.get_class(MODEL_TYPE, "LlamaForNothing")


@pytest.mark.parametrize(
    ("modeling", "config", "message"),
    [
        ({"gpu": LLAMA_MODELING, "tpu": LLAMA_MODELING}, "transformers.LlamaConfig", "unknown backend"),
        ({"npu": LLAMA_MODELING}, "transformers.LlamaConfig", "must include the 'gpu' backend"),
        (
            {"gpu": LLAMA_MODELING, "npu": LLAMA_MODELING},
            "transformers.LlamaConfig",
            r"modeling\['npu'\] is the 'gpu'",
        ),
        ({"gpu": "not a path"}, "transformers.LlamaConfig", "dotted import path"),
        ({"gpu": LLAMA_MODELING}, "transformers..LlamaConfig", "dotted import path"),
    ],
)
def test_malformed_registration_is_rejected_before_anything_is_stored(
    modeling: dict[str, str], config: str, message: str
) -> None:
    with pytest.raises(RegistryError, match=message):
        register_model(MODEL_TYPE, modeling=modeling, config=config)
    assert MODEL_TYPE not in MODELING_REGISTRY
    assert MODEL_TYPE not in MODEL_CONFIG_REGISTRY


def test_unregister_unknown_model_type_is_an_error() -> None:
    with pytest.raises(UnknownEntryError):
        unregister_model("no_such_model")


def test_resolve_dotted_keeps_a_broken_dependency_error(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "runtime_test_broken_module.py").write_text("import runtime_test_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as caught:
        resolve_dotted("runtime_test_broken_module.SomeClass")
    assert caught.value.name == "runtime_test_missing_dependency"


def test_resolve_dotted_names_a_missing_attribute() -> None:
    with pytest.raises(ImportError, match=r"'transformers' has no attribute 'NoSuchConfig'"):
        resolve_dotted("transformers.NoSuchConfig")
