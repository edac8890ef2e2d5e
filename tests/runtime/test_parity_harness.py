"""The parity harness that per-model tests use: it passes on equal models and fails on a real difference."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch
from transformers import LlamaConfig, MinistralConfig, Qwen3Config

from modelgraft.models.loader import get_model_class
from modelgraft.models.ops import OpsConfig, causal_lm_loss_slot
from modelgraft.models.ops.kernels import eager
from modelgraft.models.testing import (
    EAGER_TOLERANCE,
    IGNORE_INDEX,
    KERNEL_TOLERANCE,
    TINY_SIZES,
    assert_step_parity,
    build_pair,
    causal_lm_batch,
    check_parity,
    run_step,
    sequence_classification_batch,
    tiny_config,
)
from modelgraft.models.testing.parity import (
    BF16_KERNEL_TOLERANCE,
    BF16_TOLERANCE,
    StepResult,
    randomize_constant_parameters,
    tolerance_for,
)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models run several times faster on one torch thread (pytest-xdist spreads tests over the cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TENSOR_DIMS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
)


def test_tiny_sizes_are_pairwise_distinct_including_projection_widths() -> None:
    dims = [TINY_SIZES[name] for name in TENSOR_DIMS]
    dims += [
        TINY_SIZES["num_attention_heads"] * TINY_SIZES["head_dim"],
        TINY_SIZES["num_key_value_heads"] * TINY_SIZES["head_dim"],
        TINY_SIZES["num_hidden_layers"],
        TINY_SIZES["num_labels"],
    ]
    assert len(set(dims)) == len(dims), dims


@pytest.mark.parametrize("config_cls", [LlamaConfig, Qwen3Config, MinistralConfig])
def test_tiny_config_applies_sizes_and_eager_attention(config_cls: type) -> None:
    config = tiny_config(config_cls, num_hidden_layers=1)
    assert (config.hidden_size, config.head_dim, config.vocab_size) == (48, 16, 131)
    assert config.num_hidden_layers == 1
    assert config._attn_implementation == "eager"


def test_causal_lm_batch_is_deterministic_and_ignores_padding() -> None:
    config = tiny_config(LlamaConfig)
    first, second = causal_lm_batch(config, seed=3), causal_lm_batch(config, seed=3)
    assert all(torch.equal(first[key], second[key]) for key in first)
    padding = first["attention_mask"] == 0
    assert padding.any()
    assert (first["labels"][padding] == IGNORE_INDEX).all()
    assert (first["input_ids"][padding] == config.pad_token_id).all()
    assert not (first["input_ids"][~padding] == config.pad_token_id).any()


def test_eager_parity_holds_for_an_identical_module(upstream_as_generated: str) -> None:
    upstream, generated = check_parity(tiny_config(MinistralConfig), "MinistralForCausalLM")
    assert torch.equal(upstream.logits, generated.logits)
    assert all(grad is not None for grad in generated.grads.values())


def test_eager_parity_holds_for_sequence_classification(upstream_as_generated: str) -> None:
    config = tiny_config(MinistralConfig)
    check_parity(config, "MinistralForSequenceClassification", batch=sequence_classification_batch(config))


def test_slot_guarded_model_with_unbound_slot_matches_upstream_exactly(slot_guarded_generated: str) -> None:
    check_parity(tiny_config(MinistralConfig), "MinistralForCausalLM")


def test_slot_guarded_model_with_the_eager_reference_kernel_matches_upstream(slot_guarded_generated: str) -> None:
    config = tiny_config(MinistralConfig)
    pair = build_pair(
        config,
        get_model_class(slot_guarded_generated, "MinistralForCausalLM", use_hf=True),
        get_model_class(slot_guarded_generated, "MinistralForCausalLM"),
    )
    batch = causal_lm_batch(config)
    causal_lm_loss_slot.bind(eager.causal_lm_loss, name="eager-reference")
    assert_step_parity(run_step(pair.upstream, batch), run_step(pair.generated, batch), logits="equal")


def test_slot_guarded_model_with_chunked_loss_matches_within_kernel_tolerance(slot_guarded_generated: str) -> None:
    config = tiny_config(MinistralConfig)
    ops = OpsConfig({"causal_lm_loss": "chunked"}, kernel_options={"causal_lm_loss": {"chunk_size": 7}})
    upstream, generated = check_parity(config, "MinistralForCausalLM", ops=ops)
    assert generated.logits is None
    assert upstream.logits is not None


def test_assert_step_parity_names_a_diverging_gradient(upstream_as_generated: str) -> None:
    config = tiny_config(MinistralConfig)
    upstream, generated = check_parity(config, "MinistralForCausalLM")
    name = "model.layers.1.mlp.up_proj.weight"
    grads = dict(generated.grads)
    grads[name] = grads[name] * (1 + 10 * KERNEL_TOLERANCE.rtol)
    with pytest.raises(AssertionError, match=f"grad of {name}"):
        assert_step_parity(upstream, dataclasses.replace(generated, grads=grads))


def test_assert_step_parity_requires_equal_logits_in_eager_mode(upstream_as_generated: str) -> None:
    upstream, generated = check_parity(tiny_config(MinistralConfig), "MinistralForCausalLM")
    nudged = dataclasses.replace(generated, logits=generated.logits + 1e-7)
    with pytest.raises(AssertionError, match="must be equal"):
        assert_step_parity(upstream, nudged)
    assert_step_parity(upstream, nudged, logits="close")


# -- bound kernels are proven to run -------------------------------------------------------------------
CHUNKED = OpsConfig({"causal_lm_loss": "chunked"}, kernel_options={"causal_lm_loss": {"chunk_size": 7}})


def test_check_parity_fails_when_a_bound_kernel_is_never_called(upstream_as_generated: str) -> None:
    """Upstream's module guards nothing: the chunked loss never runs, so the run compared upstream with itself."""
    with pytest.raises(AssertionError, match=r"never called .*'chunked' in slot 'causal_lm_loss'"):
        check_parity(tiny_config(MinistralConfig), "MinistralForCausalLM", ops=CHUNKED)


def test_check_parity_fails_when_a_bound_reference_kernel_is_never_called(upstream_as_generated: str) -> None:
    with pytest.raises(AssertionError, match=r"never called .*in slot 'rms_norm'"):
        check_parity(tiny_config(MinistralConfig), "MinistralForCausalLM", kernels={"rms_norm": eager.rms_norm})


def test_check_parity_counts_the_calls_of_each_bound_kernel(slot_guarded_generated: str) -> None:
    config = tiny_config(MinistralConfig)
    _, by_ops = check_parity(config, "MinistralForCausalLM", ops=CHUNKED)
    assert dict(by_ops.calls) == {"causal_lm_loss": 1}
    _, by_function = check_parity(
        config, "MinistralForCausalLM", kernels={"causal_lm_loss": eager.causal_lm_loss}, logits="equal"
    )
    assert dict(by_function.calls) == {"causal_lm_loss": 1}
    _, unbound = check_parity(config, "MinistralForCausalLM")
    assert dict(unbound.calls) == {}
    assert not causal_lm_loss_slot.use_non_eager_impl  # restored after the run


def test_check_parity_with_a_kernel_that_misreads_an_argument_fails(slot_guarded_generated: str) -> None:
    """A reference kernel bound in a slot catches a wrong argument: here the labels shifted by one token."""

    def wrong_labels(hidden_states: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, **kwargs: object):
        return eager.causal_lm_loss(hidden_states, weight, labels.roll(1, dims=-1), **kwargs)

    with pytest.raises(AssertionError, match="loss"):
        check_parity(tiny_config(MinistralConfig), "MinistralForCausalLM", kernels={"causal_lm_loss": wrong_labels})


def test_check_parity_names_an_unknown_slot(slot_guarded_generated: str) -> None:
    with pytest.raises(ValueError, match="no op slot named"):
        check_parity(tiny_config(MinistralConfig), "MinistralForCausalLM", kernels={"nope": eager.rope})


# -- bf16 ----------------------------------------------------------------------------------------------
def test_bf16_eager_parity_holds_for_an_identical_module(upstream_as_generated: str) -> None:
    upstream, generated = check_parity(tiny_config(MinistralConfig), "MinistralForCausalLM", dtype=torch.bfloat16)
    assert generated.logits.dtype == torch.bfloat16
    assert torch.equal(upstream.logits, generated.logits)
    assert all(grad is None or grad.dtype == torch.bfloat16 for grad in generated.grads.values())


def test_bf16_chunked_loss_matches_within_the_bf16_kernel_tolerance(slot_guarded_generated: str) -> None:
    _, generated = check_parity(
        tiny_config(MinistralConfig), "MinistralForCausalLM", ops=CHUNKED, dtype=torch.bfloat16
    )
    assert generated.calls == {"causal_lm_loss": 1}


def test_tolerance_for_each_dtype() -> None:
    assert tolerance_for(torch.float32, kernels=False) == EAGER_TOLERANCE
    assert tolerance_for(torch.float32, kernels=True) == KERNEL_TOLERANCE
    assert tolerance_for(torch.bfloat16, kernels=False) == BF16_TOLERANCE
    assert tolerance_for(torch.bfloat16, kernels=True) == BF16_KERNEL_TOLERANCE
    with pytest.raises(ValueError, match="float16"):
        tolerance_for(torch.float16, kernels=False)


def test_norm_wise_tolerance_allows_a_small_tensor_wide_error_not_a_large_one() -> None:
    expected = torch.linspace(-1, 1, 101)
    loss = torch.tensor(1.0)
    near = {"grads": {"w": expected + 1e-3 * torch.sign(expected)}}  # tiny elements off by more than themselves
    upstream = StepResult(loss=loss, logits=None, grads={"w": expected})
    assert_step_parity(
        upstream, StepResult(loss=loss, logits=None, **near), tolerance=BF16_KERNEL_TOLERANCE, logits="skip"
    )
    with pytest.raises(AssertionError, match="exceeds"):
        assert_step_parity(
            upstream, StepResult(loss=loss, logits=None, **near), tolerance=EAGER_TOLERANCE, logits="skip"
        )
    far = StepResult(loss=loss, logits=None, grads={"w": expected * 1.1})
    with pytest.raises(AssertionError, match="grad of w: .*norm-wise"):
        assert_step_parity(upstream, far, tolerance=BF16_KERNEL_TOLERANCE, logits="skip")


# -- the aux loss and constant parameters --------------------------------------------------------------
def test_assert_step_parity_compares_the_aux_loss() -> None:
    loss = torch.tensor(2.0)
    upstream = StepResult(loss=loss, logits=None, grads={}, aux_loss=torch.tensor(0.5))
    assert_step_parity(upstream, dataclasses.replace(upstream), logits="skip")
    with pytest.raises(AssertionError, match="aux loss"):
        assert_step_parity(upstream, dataclasses.replace(upstream, aux_loss=torch.tensor(0.5001)), logits="skip")
    with pytest.raises(AssertionError, match="aux loss: upstream present, generated none"):
        assert_step_parity(upstream, dataclasses.replace(upstream, aux_loss=None), logits="skip")


def test_build_pair_gives_constant_parameters_distinct_values_on_both_sides() -> None:
    config = tiny_config(LlamaConfig)
    cls = get_model_class("llama", "LlamaForCausalLM", use_hf=True)
    pair = build_pair(config, cls, cls)
    plain = build_pair(config, cls, cls, randomize_constants=False)
    norm = "model.layers.0.input_layernorm.weight"
    assert torch.equal(plain.upstream.state_dict()[norm], torch.ones(config.hidden_size))
    weights = pair.upstream.state_dict()[norm]
    assert not torch.equal(weights, torch.ones_like(weights)) and len(weights.unique()) == config.hidden_size
    assert torch.equal(pair.generated.state_dict()[norm], weights)
    projection = "model.layers.0.mlp.up_proj.weight"  # random already: left as initialized
    assert torch.equal(pair.upstream.state_dict()[projection], plain.upstream.state_dict()[projection])


def test_randomize_constant_parameters_names_what_it_changed() -> None:
    model = get_model_class("llama", "LlamaForCausalLM", use_hf=True)(tiny_config(LlamaConfig, num_hidden_layers=1))
    changed = randomize_constant_parameters(model)
    assert changed == [
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight",
        "model.norm.weight",
    ]
    assert randomize_constant_parameters(model) == []
