"""The loader: generated or upstream class by model_type and architecture, ops bound, clear errors."""

from __future__ import annotations

import pytest
import transformers
from transformers import MinistralConfig
from transformers.models.ministral import modeling_ministral

from modelgraft.models.loader import backend_ops, build_model, get_model_class
from modelgraft.models.ops import KERNEL_FAMILIES, KernelUnavailableError, OpsConfig, bind_ops, current_ops
from modelgraft.models.registry import UnknownEntryError
from modelgraft.models.testing import tiny_config


def test_get_model_class_returns_the_generated_class(upstream_as_generated: str) -> None:
    cls = get_model_class(upstream_as_generated, "MinistralForCausalLM")
    assert cls is modeling_ministral.MinistralForCausalLM


def test_get_model_class_with_use_hf_returns_the_transformers_class(slot_guarded_generated: str) -> None:
    generated = get_model_class(slot_guarded_generated, "MinistralForCausalLM")
    upstream = get_model_class(slot_guarded_generated, "MinistralForCausalLM", use_hf=True)
    assert upstream is transformers.MinistralForCausalLM
    assert generated is not upstream and issubclass(generated, upstream)


def test_use_hf_with_an_unknown_architecture_is_an_error() -> None:
    with pytest.raises(UnknownEntryError, match="no model class 'MinistralForNothing'"):
        get_model_class("ministral", "MinistralForNothing", use_hf=True)


def test_build_model_from_config_uses_its_first_architecture(slot_guarded_generated: str) -> None:
    config = tiny_config(MinistralConfig, architectures=["MinistralForCausalLM"])
    model = build_model(config)
    assert type(model).__module__ == get_model_class(slot_guarded_generated, "MinistralForCausalLM").__module__


def test_build_model_explicit_architecture_wins(upstream_as_generated: str) -> None:
    config = tiny_config(MinistralConfig, architectures=["MinistralForCausalLM"])
    model = build_model(config, architecture="MinistralModel")
    assert type(model) is modeling_ministral.MinistralModel


def test_build_model_without_any_architecture_is_an_error(upstream_as_generated: str) -> None:
    with pytest.raises(ValueError, match="pass architecture="):
        build_model(tiny_config(MinistralConfig))


def test_build_model_from_an_architecture_name_builds_the_registered_config(upstream_as_generated: str) -> None:
    model = build_model("MinistralForCausalLM", hidden_size=48, num_hidden_layers=1, vocab_size=131, head_dim=16)
    assert isinstance(model.config, MinistralConfig)
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (48, 1)
    assert model.lm_head.weight.shape == (131, 48)


def test_build_model_with_use_hf_builds_the_transformers_class(slot_guarded_generated: str) -> None:
    model = build_model(tiny_config(MinistralConfig), architecture="MinistralForCausalLM", use_hf=True)
    assert type(model) is transformers.MinistralForCausalLM


def test_build_model_overrides_apply_to_a_copy_of_the_config(upstream_as_generated: str) -> None:
    config = tiny_config(MinistralConfig)
    model = build_model(config, architecture="MinistralModel", num_hidden_layers=1, attn_implementation="sdpa")
    assert len(model.layers) == 1
    assert model.config._attn_implementation == "sdpa"
    assert config.num_hidden_layers == 3
    assert config._attn_implementation == "eager"


def test_build_model_rejects_an_override_the_config_lacks(upstream_as_generated: str) -> None:
    with pytest.raises(ValueError, match=r"no attribute\(s\) \['hiden_size'\]"):
        build_model(tiny_config(MinistralConfig), architecture="MinistralModel", hiden_size=8)


def test_build_model_of_an_unregistered_model_type_lists_the_registered_ones() -> None:
    with pytest.raises(UnknownEntryError, match="'ministral' is not registered"):
        build_model(tiny_config(MinistralConfig), architecture="MinistralForCausalLM")


def test_build_model_binds_ops(slot_guarded_generated: str) -> None:
    build_model(
        tiny_config(MinistralConfig), architecture="MinistralForCausalLM", ops=OpsConfig({"causal_lm_loss": "chunked"})
    )
    assert current_ops() == {"causal_lm_loss": "chunked"}


def test_build_model_without_ops_leaves_the_binding_alone(slot_guarded_generated: str) -> None:
    bind_ops(OpsConfig({"causal_lm_loss": "chunked"}))
    build_model(tiny_config(MinistralConfig), architecture="MinistralForCausalLM")
    assert current_ops() == {"causal_lm_loss": "chunked"}


@pytest.mark.skipif(KERNEL_FAMILIES["liger"].unavailable_reason() is None, reason="liger can run on this machine")
def test_build_model_with_unavailable_kernels_raises(slot_guarded_generated: str) -> None:
    with pytest.raises(KernelUnavailableError, match="'liger'"):
        build_model(
            tiny_config(MinistralConfig), architecture="MinistralForCausalLM", ops=OpsConfig.everywhere("liger")
        )
    assert current_ops() == {}


def test_build_model_rejects_non_eager_ops_with_use_hf(upstream_as_generated: str) -> None:
    with pytest.raises(ValueError, match="no effect on a plain transformers model"):
        build_model(
            tiny_config(MinistralConfig),
            architecture="MinistralForCausalLM",
            use_hf=True,
            ops=OpsConfig({"causal_lm_loss": "chunked"}),
        )


def test_the_npu_backend_builds_the_class_every_backend_shares(upstream_as_generated: str) -> None:
    assert get_model_class(upstream_as_generated, "MinistralForCausalLM", backend="npu") is get_model_class(
        upstream_as_generated, "MinistralForCausalLM", backend="gpu"
    )


def test_an_unknown_backend_is_an_error_naming_the_known_ones(upstream_as_generated: str) -> None:
    with pytest.raises(UnknownEntryError, match=r"unknown backend 'tpu' \(known: gpu, npu\)"):
        build_model(tiny_config(MinistralConfig), architecture="MinistralForCausalLM", backend="tpu")


def test_the_gpu_backend_adds_no_kernels_to_the_ops() -> None:
    ops = OpsConfig({"causal_lm_loss": "chunked"})
    assert backend_ops("gpu", ops) is ops
    assert backend_ops("gpu", None) is None


def test_the_npu_backend_is_the_npu_family_on_every_slot_it_serves() -> None:
    assert backend_ops("npu", None) == OpsConfig.everywhere("npu")


def test_ops_given_with_a_backend_keep_their_kernels_and_options() -> None:
    ops = OpsConfig(
        {"rms_norm": "eager", "causal_lm_loss": "chunked"}, kernel_options={"causal_lm_loss": {"chunk_size": 7}}
    )

    combined = backend_ops("npu", ops)

    assert dict(combined.kernels) == {**OpsConfig.everywhere("npu").kernels, **ops.kernels}
    assert combined.kernel_for("rms_norm") == "eager"
    assert combined.kernel_for("rope") == "npu"
    assert dict(combined.options_for("causal_lm_loss")) == {"chunk_size": 7}


@pytest.mark.skipif(KERNEL_FAMILIES["npu"].unavailable_reason() is None, reason="torch_npu is installed here")
def test_building_for_the_npu_backend_without_torch_npu_raises(slot_guarded_generated: str) -> None:
    with pytest.raises(KernelUnavailableError, match="torch_npu"):
        build_model(tiny_config(MinistralConfig), architecture="MinistralForCausalLM", backend="npu")
    assert current_ops() == {}


def test_use_hf_ignores_the_backend_kernels(upstream_as_generated: str) -> None:
    model = build_model(tiny_config(MinistralConfig), architecture="MinistralForCausalLM", backend="npu", use_hf=True)
    assert type(model) is transformers.MinistralForCausalLM
    assert current_ops() == {}
