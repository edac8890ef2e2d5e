"""gpt_oss's router through topk_softmax_router_slot: the reference kernel is exact, a wrong one shows.

The suite binds the reference kernel within the eager tolerance; here, bit for bit, a training step with
it bound equals the eager step (upstream's router code), and every router returns upstream's logits,
weights and experts. Then kernels that each get one routing setting wrong must change the logits or the
aux loss of the tiny model. Upstream initialises the router bias to zeros; :func:`build_pair` gives it
random values first, so a kernel that drops the bias routes elsewhere.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from modelgraft.models.gpt_oss.tests.test_gpt_oss_parity import GPT_OSS
from modelgraft.models.loader import get_model_class
from modelgraft.models.ops.kernels import eager
from modelgraft.models.testing import build_pair, causal_lm_batch
from modelgraft.models.testing.parity import ModelPair, eager_slots_on_one_thread, tolerance_for
from modelgraft.models.testing.routing import (
    assert_same_router_outputs,
    assert_same_step,
    counted_reference,
    kernel_bound,
    router_outputs,
    routes_differently,
    step_with_kernel,
)

SLOT = "topk_softmax_router"
DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


@pytest.fixture(autouse=True)
def _eager_slots_one_thread():
    with eager_slots_on_one_thread():
        yield


def _pair(dtype: torch.dtype = torch.float32, backend: str = "gpu") -> ModelPair:
    config = GPT_OSS.config()
    upstream = get_model_class("gpt_oss", GPT_OSS.causal_lm, use_hf=True)
    return build_pair(config, upstream, get_model_class("gpt_oss", GPT_OSS.causal_lm, backend), dtype=dtype)


def _batch(pair: ModelPair) -> dict[str, Any]:
    return {**causal_lm_batch(pair.upstream.config), "output_router_logits": True}


@pytest.mark.parametrize("backend", GPT_OSS.backends)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_router_kernel_is_the_eager_step_bit_for_bit(backend: str, dtype: torch.dtype) -> None:
    pair = _pair(dtype, backend)
    batch = _batch(pair)
    calls: list[str] = []
    eager_step = step_with_kernel(pair.generated, batch, SLOT, None)
    assert_same_step(eager_step, step_with_kernel(pair.generated, batch, SLOT, counted_reference(SLOT, calls)))
    assert len(calls) == pair.upstream.config.num_hidden_layers  # every layer routes


def test_every_router_returns_upstreams_logits_weights_and_experts_through_the_slot() -> None:
    pair = _pair()
    batch = causal_lm_batch(pair.upstream.config)
    del batch["labels"]
    expected = router_outputs(pair.upstream, batch, ".mlp.router")
    calls: list[str] = []
    with kernel_bound(SLOT, counted_reference(SLOT, calls)):
        actual = router_outputs(pair.generated, batch, ".mlp.router")
    assert len(actual) == len(expected) == len(calls) == pair.upstream.config.num_hidden_layers
    assert_same_router_outputs(expected, actual)


def _without_bias(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, **settings: Any) -> Any:
    return eager.topk_softmax_router(hidden, weight, None, **settings)


def _one_fewer(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, *, top_k: int) -> Any:
    return eager.topk_softmax_router(hidden, weight, bias, top_k=top_k - 1)


def _softmax_over_every_expert(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, *, top_k: int) -> Any:
    """Qwen's order (softmax, then top-k, no renormalisation) on gpt_oss's logits."""
    logits = torch.nn.functional.linear(hidden, weight, bias)
    weights, indices = torch.topk(logits.softmax(dim=-1), top_k, dim=-1)
    return logits, weights, indices


#: Kernels that get one routing setting of gpt_oss wrong, by the slip: the tiny model must expose each.
MUTANTS = {
    "router without its bias": _without_bias,
    "router choosing one expert fewer": _one_fewer,
    "router taking the softmax over every expert": _softmax_over_every_expert,
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_router_kernel_that_gets_one_setting_wrong_changes_the_model(mutant: str) -> None:
    pair = _pair()
    batch = _batch(pair)
    expected = step_with_kernel(pair.generated, batch, SLOT, None)
    actual = step_with_kernel(pair.generated, batch, SLOT, MUTANTS[mutant])
    assert routes_differently(expected, actual, tolerance_for(torch.float32, kernels=False)), mutant
