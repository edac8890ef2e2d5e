"""The parity harness that per-model tests use: it passes on equal models and fails on a real difference."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import LlamaConfig, MinistralConfig, Qwen3Config

from models.loader import get_model_class
from models.ops import OpsConfig, causal_lm_loss_slot
from models.ops.kernels import eager
from models.testing import (
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
