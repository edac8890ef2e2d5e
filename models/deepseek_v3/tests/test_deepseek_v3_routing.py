"""DeepSeek-V3's routing and shared experts through their slots, with a correction bias that matters.

Upstream initialises ``e_score_correction_bias`` to zeros (the trained values come from a checkpoint), so in
the MoE suite a router kernel that ignored the bias would still match. Here every router gets random bias
values first (:func:`random_bias_pair`), large enough to change which experts win. Upstream's DeepSeek-V3
computes no aux loss and records no router logits in its output (``CausalLMOutputWithPast``); the routers
still return ``(router_logits, weights, indices)``, and those are compared layer by layer instead.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from transformers import DeepseekV3Config, PreTrainedModel

from modelgraft.models.deepseek_v3.tests.test_deepseek_v3_parity import DEEPSEEK_V3
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.ops import SLOTS, OpsConfig, bound_ops
from modelgraft.models.ops.kernels import eager
from modelgraft.models.testing import build_pair, causal_lm_batch
from modelgraft.models.testing.dense_suite import reference_kernels_bound
from modelgraft.models.testing.parity import (
    ModelPair,
    assert_step_parity,
    eager_slots_on_one_thread,
    run_step,
    tolerance_for,
)
from modelgraft.models.testing.routing import GROUP_LIMITED_MUTANTS, router_outputs

DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


@pytest.fixture(autouse=True)
def _eager_slots_one_thread():
    with eager_slots_on_one_thread():
        yield


@torch.no_grad()
def randomize_correction_biases(model: PreTrainedModel, *, seed: int = 0) -> None:
    """Every router's ``e_score_correction_bias`` drawn from N(0, 0.5^2): sigmoid scores differ by less."""
    generator = torch.Generator().manual_seed(seed)
    for name, buffer in model.named_buffers():
        if name.endswith(".e_score_correction_bias"):
            buffer.copy_(torch.randn(buffer.shape, generator=generator) * 0.5)


def random_bias_pair(dtype: torch.dtype = torch.float32, backend: str = "gpu", **overrides: Any) -> ModelPair:
    """Upstream and generated DeepSeek-V3 with the same weights and the same random correction biases."""
    config = DEEPSEEK_V3.config(**overrides)
    pair = build_pair(
        config,
        get_model_class("deepseek_v3", DEEPSEEK_V3.causal_lm, use_hf=True),
        get_model_class("deepseek_v3", DEEPSEEK_V3.causal_lm, backend),
        dtype=dtype,
    )
    randomize_correction_biases(pair.upstream)
    pair.generated.load_state_dict(pair.upstream.state_dict(), strict=True)
    return pair


def _sparse_layers(config: DeepseekV3Config) -> int:
    return config.num_hidden_layers - config.first_k_dense_replace


def _logits(model: PreTrainedModel, batch: dict[str, Any]) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).logits


@pytest.mark.parametrize("backend", DEEPSEEK_V3.backends)
@pytest.mark.parametrize("dtype", DTYPES)
def test_eager_step_with_random_correction_biases_matches_upstream(backend: str, dtype: torch.dtype) -> None:
    """Logits equal, loss and every gradient within the eager tolerance of ``dtype``."""
    pair = random_bias_pair(dtype, backend)
    batch = causal_lm_batch(pair.upstream.config)
    expected, actual = run_step(pair.upstream, batch), run_step(pair.generated, batch)
    assert_step_parity(expected, actual, tolerance=tolerance_for(dtype, kernels=False), logits="equal")


def test_every_router_returns_upstreams_logits_weights_and_experts() -> None:
    pair = random_bias_pair()
    batch = causal_lm_batch(pair.upstream.config)
    del batch["labels"]
    expected, actual = (
        router_outputs(pair.upstream, batch, ".mlp.gate"),
        router_outputs(pair.generated, batch, ".mlp.gate"),
    )
    config = pair.upstream.config
    tokens = batch["input_ids"].numel()
    assert len(actual) == len(expected) == _sparse_layers(config)
    for layer, (want, got) in enumerate(zip(expected, actual)):
        logits, weights, indices = got
        assert logits.shape == (tokens, config.n_routed_experts) and logits.dtype == torch.float32
        assert weights.shape == indices.shape == (tokens, config.num_experts_per_tok)
        for what, w, g in zip(("router logits", "weights", "expert indices"), want, got):
            assert torch.equal(g, w), f"{what} of sparse layer {layer} differ from upstream"


@pytest.mark.parametrize("norm_topk_prob", [True, False], ids=["renormalised", "not-renormalised"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_router_reference_kernel_matches_upstream_with_random_biases(norm_topk_prob: bool, dtype: torch.dtype) -> None:
    """The slot gets the bias and every routing setting: a kernel dropping one would route elsewhere."""
    pair = random_bias_pair(dtype, norm_topk_prob=norm_topk_prob)
    batch = causal_lm_batch(pair.upstream.config)
    expected = run_step(pair.upstream, batch)
    calls: Counter[str] = Counter()

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls["group_limited_router"] += 1
        return eager.group_limited_router(*args, **kwargs)

    with bound_ops(OpsConfig()):
        SLOTS["group_limited_router"].bind(counted, name="reference.group_limited_router")
        actual = run_step(pair.generated, batch)
    assert calls["group_limited_router"] == _sparse_layers(pair.upstream.config)
    assert_step_parity(expected, actual, tolerance=tolerance_for(dtype, kernels=False), logits="equal")


def test_each_deepseek_slot_is_called_once_per_use() -> None:
    """Per forward: one router and one experts call per sparse layer; one whole-MLP call per layer (the dense
    layers' MLP, or the sparse layers' shared experts)."""
    config = DEEPSEEK_V3.config()
    model = build_model(config, architecture=DEEPSEEK_V3.causal_lm)
    calls: Counter[str] = Counter()
    with reference_kernels_bound(calls), torch.no_grad():
        model(**causal_lm_batch(config))
    assert calls["group_limited_router"] == calls["moe_experts"] == _sparse_layers(config) == 2
    assert calls["gated_mlp"] == config.num_hidden_layers
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
    with bound_ops(OpsConfig()):
        SLOTS[slot].bind(kernel, name=mutant)
        actual = _logits(pair.generated, batch)
    tolerance = tolerance_for(torch.float32, kernels=False)
    assert not torch.allclose(actual, expected, rtol=tolerance.rtol, atol=tolerance.atol)
