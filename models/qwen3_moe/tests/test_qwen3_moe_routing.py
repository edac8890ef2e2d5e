"""Qwen3-MoE's router through softmax_topk_router_slot: the reference kernel is exact, a wrong one shows.

The suite binds the reference kernel within the eager tolerance; here, bit for bit, a training step with
it bound equals the eager step (upstream's router code), and every router returns upstream's logits,
weights and experts. Then kernels that each get one routing setting wrong must change the logits or the
aux loss of the tiny model (``norm_topk_prob`` on, four experts of seven per token).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from modelgraft.models.loader import get_model_class
from modelgraft.models.ops.kernels import eager
from modelgraft.models.qwen3_moe.tests.test_qwen3_moe_parity import QWEN3_MOE
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

SLOT = "softmax_topk_router"
DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


@pytest.fixture(autouse=True)
def _eager_slots_one_thread():
    with eager_slots_on_one_thread():
        yield


def _pair(dtype: torch.dtype = torch.float32, backend: str = "gpu") -> ModelPair:
    config = QWEN3_MOE.config()
    upstream = get_model_class("qwen3_moe", QWEN3_MOE.causal_lm, use_hf=True)
    return build_pair(config, upstream, get_model_class("qwen3_moe", QWEN3_MOE.causal_lm, backend), dtype=dtype)


def _batch(pair: ModelPair) -> dict[str, Any]:
    return {**causal_lm_batch(pair.upstream.config), "output_router_logits": True}


@pytest.mark.parametrize("backend", QWEN3_MOE.backends)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_router_kernel_is_the_eager_step_bit_for_bit(backend: str, dtype: torch.dtype) -> None:
    pair = _pair(dtype, backend)
    batch = _batch(pair)
    calls: list[str] = []
    eager_step = step_with_kernel(pair.generated, batch, SLOT, None)
    assert_same_step(eager_step, step_with_kernel(pair.generated, batch, SLOT, counted_reference(SLOT, calls)))
    assert len(calls) == 2  # one router per sparse layer


def test_every_router_returns_upstreams_logits_weights_and_experts_through_the_slot() -> None:
    pair = _pair()
    batch = causal_lm_batch(pair.upstream.config)
    del batch["labels"]
    expected = router_outputs(pair.upstream, batch, ".mlp.gate")
    calls: list[str] = []
    with kernel_bound(SLOT, counted_reference(SLOT, calls)):
        actual = router_outputs(pair.generated, batch, ".mlp.gate")
    assert len(actual) == len(expected) == len(calls) == 2  # the sparse layers 0 and 2, each through the slot
    assert_same_router_outputs(expected, actual)


def _mutant(**changes: Any) -> Callable[..., Any]:
    def kernel(hidden: torch.Tensor, weight: torch.Tensor, **settings: Any) -> Any:
        return eager.softmax_topk_router(hidden, weight, **{**settings, **changes})

    return kernel


def _logits_as_weights(hidden: torch.Tensor, weight: torch.Tensor, **settings: Any) -> Any:
    """Returns the softmax probabilities where upstream returns the logits: the aux loss softmaxes them again."""
    logits, weights, indices = eager.softmax_topk_router(hidden, weight, **settings)
    return logits.softmax(dim=-1), weights, indices


#: Kernels that get one routing setting of Qwen3-MoE wrong, by the slip: the tiny model must expose each.
MUTANTS = {
    "router that skips the renormalisation": _mutant(norm_topk_prob=False),
    "router choosing one expert fewer": _mutant(top_k=QWEN3_MOE.sizes["num_experts_per_tok"] - 1),
    "router returning probabilities as its logits": _logits_as_weights,
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_router_kernel_that_gets_one_setting_wrong_changes_the_model(mutant: str) -> None:
    pair = _pair()
    batch = _batch(pair)
    expected = step_with_kernel(pair.generated, batch, SLOT, None)
    actual = step_with_kernel(pair.generated, batch, SLOT, MUTANTS[mutant])
    assert routes_differently(expected, actual, tolerance_for(torch.float32, kernels=False)), mutant
