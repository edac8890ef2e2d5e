"""Converter registration: dotted paths only, no duplicates, and qwen3_moe's converter is registered."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from modelgraft import models
from modelgraft.models.converters import CONVERTER_REGISTRY, converter_for, register_converter
from modelgraft.models.converters.moe import FusedExpertsConverter
from modelgraft.models.registry import RegistryError


def test_qwen3_moe_registers_its_converter_with_the_model() -> None:
    assert "qwen3_moe" in models.MODEL_PACKAGES
    assert CONVERTER_REGISTRY["qwen3_moe"] == "modelgraft.models.qwen3_moe.checkpoint.checkpoint_converter"


def test_the_qwen3_moe_converter_takes_its_sizes_from_the_config() -> None:
    config = SimpleNamespace(model_type="qwen3_moe", num_experts=5, hidden_size=12, moe_intermediate_size=7)
    converter = converter_for(config)
    assert isinstance(converter, FusedExpertsConverter)
    assert (converter.num_experts, converter.hidden_size, converter.intermediate_size) == (5, 12, 7)


def test_a_dense_model_has_no_converter() -> None:
    assert converter_for(SimpleNamespace(model_type="qwen3")) is None


def test_registering_a_model_type_twice_is_an_error() -> None:
    with pytest.raises(RegistryError, match="'qwen3_moe' is already registered"):
        register_converter("qwen3_moe", "modelgraft.models.qwen3_moe.checkpoint.checkpoint_converter")


def test_a_factory_must_be_a_dotted_path() -> None:
    with pytest.raises(RegistryError, match="dotted import path"):
        register_converter("modelgraft_tests_other", "not a path")
