"""GLM-MoE-DSA's router and shared experts through their slots, with a correction bias that matters.

GLM routes as DeepSeek-V3 does (sigmoid scores, a correction bias, group-limited top-k), behind
group_limited_router; its MLP, the dense first layer and the shared experts of every sparse layer, goes
behind gated_mlp as a whole. Upstream records no router logits in its output (``CausalLMOutputWithPast``),
so what each router returns, ``(router_logits, weights, indices)``, is compared with upstream's layer by
layer. Every test here gives the routers random correction biases (:func:`random_bias_pair`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from transformers import GlmMoeDsaConfig, PreTrainedModel

from modelgraft.models.glm_moe_dsa.tests.test_glm_moe_dsa_parity import GLM_MOE_DSA, random_bias_pair
from modelgraft.models.loader import build_model
from modelgraft.models.ops import SLOTS
from modelgraft.models.ops.kernels import eager
from modelgraft.models.testing import causal_lm_batch
from modelgraft.models.testing.dense_suite import reference_kernels_bound
from modelgraft.models.testing.parity import assert_step_parity, eager_slots_on_one_thread, run_step, tolerance_for
from modelgraft.models.testing.routing import GROUP_LIMITED_MUTANTS, router_outputs

DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


@pytest.fixture(autouse=True)
def _eager_slots_one_thread():
    with eager_slots_on_one_thread():
        yield


def _sparse_layers(config: GlmMoeDsaConfig) -> int:
    return config.mlp_layer_types.count("sparse")


def _logits(model: PreTrainedModel, batch: dict[str, Any]) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).logits


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_router_returns_upstreams_logits_weights_and_experts(dtype: torch.dtype) -> None:
    pair = random_bias_pair(dtype)
    batch = causal_lm_batch(pair.upstream.config)
    del batch["labels"]
    expected, actual = (
        router_outputs(pair.upstream, batch, ".mlp.gate"),
        router_outputs(pair.generated, batch, ".mlp.gate"),
    )
    config = pair.upstream.config
    tokens = batch["input_ids"].numel()
    assert len(actual) == len(expected) == _sparse_layers(config) == 2
    for layer, (want, got) in enumerate(zip(expected, actual)):
        logits, weights, indices = got
        assert logits.shape == (tokens, config.n_routed_experts) and logits.dtype == torch.float32
        assert weights.shape == indices.shape == (tokens, config.num_experts_per_tok)
        for what, w, g in zip(("router logits", "weights", "expert indices"), want, got):
            assert torch.equal(g, w), f"{what} of sparse layer {layer} differ from upstream"


@pytest.mark.parametrize("norm_topk_prob", [True, False], ids=["renormalised", "not-renormalised"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_router_reference_kernel_matches_upstream_with_random_biases(norm_topk_prob: bool, dtype: torch.dtype) -> None:
    """Logits equal and every gradient close: the slot gets the bias and every routing setting."""
    pair = random_bias_pair(dtype, norm_topk_prob=norm_topk_prob)
    batch = causal_lm_batch(pair.upstream.config)
    expected = run_step(pair.upstream, batch)
    calls: Counter[str] = Counter()

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls["group_limited_router"] += 1
        return eager.group_limited_router(*args, **kwargs)

    SLOTS["group_limited_router"].bind(counted, name="reference.group_limited_router")
    actual = run_step(pair.generated, batch)
    assert calls["group_limited_router"] == _sparse_layers(pair.upstream.config)
    assert_step_parity(expected, actual, tolerance=tolerance_for(dtype, kernels=False), logits="equal")


def test_each_glm_slot_is_called_once_per_use() -> None:
    """Per forward: a router and an experts call per sparse layer, a whole-MLP call per layer (the dense
    layer's MLP or a sparse layer's shared experts), an indexer call per layer with its own indexer."""
    config = GLM_MOE_DSA.config()
    model = build_model(config, architecture=GLM_MOE_DSA.causal_lm)
    calls: Counter[str] = Counter()
    with reference_kernels_bound(calls), torch.no_grad():
        model(**causal_lm_batch(config))
    assert calls["group_limited_router"] == calls["moe_experts"] == _sparse_layers(config) == 2
    assert calls["gated_mlp"] == config.num_hidden_layers
    assert calls["dsa_indexer"] == config.indexer_types.count("full") == 2
    assert calls["glu_activation"] == 0


def test_the_tiny_configs_group_limit_changes_the_logits() -> None:
    """topk_group 2 of 4 groups drops experts a plain top-k would pick, so a kernel ignoring groups fails."""
    pair = random_bias_pair()
    batch = causal_lm_batch(pair.upstream.config)
    del batch["labels"]
    grouped = _logits(pair.upstream, batch)
    for module in pair.upstream.modules():
        if hasattr(module, "topk_group"):
            module.topk_group = module.num_group
    assert not torch.allclose(_logits(pair.upstream, batch), grouped)


MUTANTS = GROUP_LIMITED_MUTANTS


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_kernel_that_gets_one_argument_wrong_changes_the_logits(mutant: str) -> None:
    slot, kernel = MUTANTS[mutant]
    pair = random_bias_pair()
    batch = causal_lm_batch(pair.upstream.config)
    del batch["labels"]
    expected = _logits(pair.upstream, batch)
    SLOTS[slot].bind(kernel, name=mutant)
    actual = _logits(pair.generated, batch)
    tolerance = tolerance_for(torch.float32, kernels=False)
    assert not torch.allclose(actual, expected, rtol=tolerance.rtol, atol=tolerance.atol)
