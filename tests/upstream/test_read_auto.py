"""The Auto tables read by path: which class ``AutoModel`` builds for a model_type, and in which package."""

from __future__ import annotations

import pytest

from modelgraft.generator.upstream.index import UpstreamSources
from modelgraft.generator.upstream.read_auto import auto_causal_lm_classes, auto_model_class, model_type_package

#: Entries of the pinned transformers' Auto tables (5.25.0).
pytestmark = pytest.mark.upstream_facts


def test_automodel_s_class_for_a_sub_type_is_read_from_model_mapping_names() -> None:
    assert auto_model_class(UpstreamSources(), "qwen3_vl_vision") == "Qwen3VLVisionModel"


def test_a_type_automodel_has_no_class_for_reads_as_none() -> None:
    assert auto_model_class(UpstreamSources(), "no_such_model_type") is None


def test_a_sub_type_s_package_is_the_one_the_special_table_names() -> None:
    assert model_type_package(UpstreamSources(), "glm4v_text") == "glm4v"


def test_a_type_the_special_table_does_not_name_is_its_own_package() -> None:
    assert model_type_package(UpstreamSources(), "hyperclovax") == "hyperclovax"


def test_the_auto_causal_lm_table_names_gpt2_s_lm_head_model() -> None:
    classes = auto_causal_lm_classes(UpstreamSources())
    assert {"GPT2LMHeadModel", "LlamaForCausalLM"} <= classes
