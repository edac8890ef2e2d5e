"""GLM-MoE-DSA: the generated modeling matches upstream transformers (the MoE suite).

The tiny config is derived from GlmMoeDsaConfig itself (modelgraft.models.testing.tiny), so its sizes satisfy the
model's own constraints; the suite checks only the slots this scaffold guards.

Edited after the copy: the DSA indexer's slot (dsa_indexer) is guarded too (its own tests are in
test_glm_moe_dsa_indexer.py), and the tiny config holds every kind of layer GLM has: layer 0 dense, layers 1-2
sparse (8 routed experts in 4 groups, 2 groups and 3 experts per token, moe_intermediate_size 28, one shared
expert, a routed scaling factor other than the default 2.5), and indexers full, shared, full, so layer 1 reuses
layer 0's top-k (upstream's cross-layer sharing) and the 11-token batch picks 6 keys per query. Upstream
initialises the router's correction bias to zeros (the real values come from a checkpoint), so the tests below
that give it random values (:func:`random_bias_pair`) are the ones where the bias steers the routing.

Upstream's GLM computes no auxiliary loss and records no router logits (aux-loss-free balancing through the
correction bias), so the suite's aux-loss tests skip; test_glm_moe_dsa_routing.py compares what every router
returns (logits, weights, experts) with upstream's, layer by layer.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import GlmMoeDsaConfig, PreTrainedModel

from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.testing import build_pair, causal_lm_batch
from modelgraft.models.testing.moe_suite import MoeModel, MoeParitySuite
from modelgraft.models.testing.parity import ModelPair, assert_step_parity, run_step, tolerance_for

GLM_MOE_DSA = MoeModel(
    model_type="glm_moe_dsa",
    config_class=GlmMoeDsaConfig,
    causal_lm="GlmMoeDsaForCausalLM",
    sequence_classification=None,
    sizes={
        "mlp_layer_types": ["dense", "sparse", "sparse"],
        "indexer_types": ["full", "shared", "full"],
        "routed_scaling_factor": 1.75,
    },
    guarded=("rms_norm", "gated_mlp", "moe_experts", "group_limited_router", "causal_lm_loss", "dsa_indexer"),
    derived_sizes=True,
    num_experts_attr="num_local_experts",
)


class TestGlmMoeDsaParity(MoeParitySuite):
    model = GLM_MOE_DSA


@torch.no_grad()
def randomize_correction_bias(model: PreTrainedModel, *, seed: int = 0) -> None:
    """Random ``e_score_correction_bias`` of every router, large enough to change which experts win."""
    generator = torch.Generator().manual_seed(seed)
    for name, buffer in model.named_buffers():
        if name.endswith(".e_score_correction_bias"):
            buffer.copy_(torch.randn(buffer.shape, generator=generator) * 0.5)


def random_bias_pair(dtype: torch.dtype = torch.float32, backend: str = "gpu", **overrides: Any) -> ModelPair:
    """Upstream and generated models with the same weights and the same random correction biases."""
    pair = build_pair(
        GLM_MOE_DSA.config(**overrides),
        get_model_class("glm_moe_dsa", GLM_MOE_DSA.causal_lm, use_hf=True),
        get_model_class("glm_moe_dsa", GLM_MOE_DSA.causal_lm, backend),
        dtype=dtype,
    )
    randomize_correction_bias(pair.upstream)
    pair.generated.load_state_dict(pair.upstream.state_dict(), strict=True)
    return pair


def test_tiny_config_has_dense_and_sparse_layers_and_a_shared_indexer() -> None:
    model = build_model(GLM_MOE_DSA.config(), architecture=GLM_MOE_DSA.causal_lm)
    kinds = [type(layer.mlp).__name__ for layer in model.model.layers]
    indexers = [layer.self_attn.indexer is not None for layer in model.model.layers]
    assert kinds == ["GlmMoeDsaMLP", "GlmMoeDsaMoE", "GlmMoeDsaMoE"]
    assert indexers == [True, False, True]
    config = model.config
    assert config.n_group > 1 and config.topk_group < config.n_group  # group-limited routing chooses groups
    assert config.index_topk < causal_lm_batch(config)["input_ids"].shape[1]  # the indexer leaves keys out


@pytest.mark.parametrize("backend", GLM_MOE_DSA.backends)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_eager_step_matches_upstream_with_random_correction_bias(backend: str, dtype: torch.dtype) -> None:
    """Logits equal, loss and every gradient within the eager tolerance of ``dtype``, the bias steering routing."""
    pair = random_bias_pair(dtype, backend)
    batch = causal_lm_batch(pair.upstream.config)
    expected, actual = run_step(pair.upstream, batch), run_step(pair.generated, batch)
    assert_step_parity(expected, actual, tolerance=tolerance_for(dtype, kernels=False), logits="equal")


def test_the_random_correction_bias_changes_the_routing() -> None:
    """Without this, a router kernel that ignored the bias would pass the test above."""
    pair = random_bias_pair()
    batch = causal_lm_batch(pair.upstream.config)
    del batch["labels"]
    with torch.no_grad():
        biased = pair.upstream(**batch).logits
        for name, buffer in pair.upstream.named_buffers():
            if name.endswith(".e_score_correction_bias"):
                buffer.zero_()
        unbiased = pair.upstream(**batch).logits
    assert not torch.allclose(biased, unbiased)


def test_router_logits_are_recorded_as_upstream_records_them() -> None:
    """Upstream records each sparse layer's router logits on request (and computes no auxiliary loss from them):
    the generated model returns the same fields, the same router logits layer by layer and the same logits."""
    pair = random_bias_pair()
    batch = causal_lm_batch(pair.upstream.config)
    with torch.no_grad():
        expected = pair.upstream(**batch, output_router_logits=True)
        actual = pair.generated(**batch, output_router_logits=True)
    assert set(actual.keys()) == set(expected.keys()) == {"loss", "logits", "cache", "router_logits"}
    assert len(actual.router_logits) == len(expected.router_logits) > 0
    for mine, theirs in zip(actual.router_logits, expected.router_logits, strict=True):
        assert torch.equal(mine, theirs)
    assert torch.equal(actual.logits, expected.logits)
