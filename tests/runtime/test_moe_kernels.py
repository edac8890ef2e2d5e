"""The MoE slot kernels: the eager references are upstream's semantics, the grouped kernel matches them.

Tolerances: the eager experts reference is bitwise upstream's loop (same operations, same order) for
every expert layout of the contract (qwen3_moe, mixtral, deepseek_v3; gpt_oss's transposed, interleaved,
biased, clamped experts; deepseek_v4's clamped ones); the grouped kernel applies the routing weight
before the down projection, so it is held to ``KERNEL_TOLERANCE`` (rtol 1e-4, atol 1e-5) in outputs
and in every gradient. Every layout in fp32 and bf16: tests/runtime/test_grouped_experts_layouts.py.
"""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts, load_balancing_loss_func

from modelgraft.models.ops import OpsConfig
from modelgraft.models.ops.kernels import eager, grouped_experts
from modelgraft.models.testing import KERNEL_TOLERANCE

NUM_EXPERTS, TOP_K, HIDDEN, INTERMEDIATE, TOKENS = 7, 3, 20, 12, 29


def _routing(seed: int = 0, tokens: int = TOKENS, experts: int = NUM_EXPERTS) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, HIDDEN, generator=generator)
    probs = torch.randn(tokens, experts, generator=generator).softmax(-1)
    weights, index = torch.topk(probs, TOP_K, dim=-1)
    gate_up = torch.randn(experts, 2 * INTERMEDIATE, HIDDEN, generator=generator) * 0.2
    down = torch.randn(experts, HIDDEN, INTERMEDIATE, generator=generator) * 0.2
    return hidden, index, weights, gate_up, down


def _with_grads(kernel, hidden, index, weights, gate_up, down):
    leaves = [t.clone().requires_grad_(True) for t in (hidden, weights, gate_up, down)]
    out = kernel(leaves[0], index, leaves[1], leaves[2], leaves[3], "silu")
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return out.detach(), [leaf.grad for leaf in leaves]


def test_eager_experts_reference_is_upstreams_loop_bitwise() -> None:
    hidden, index, weights, gate_up, down = _routing()
    config = Qwen3MoeConfig(
        hidden_size=HIDDEN, num_experts=NUM_EXPERTS, moe_intermediate_size=INTERMEDIATE, experts_implementation="eager"
    )
    experts = Qwen3MoeExperts(config)
    with torch.no_grad():
        experts.gate_up_proj.copy_(gate_up)
        experts.down_proj.copy_(down)
        expected = experts(hidden, index, weights)
    assert torch.equal(eager.moe_experts(hidden, index, weights, gate_up, down, "silu"), expected)


def _assert_grouped_matches_eager(*routing: torch.Tensor) -> None:
    expected, expected_grads = _with_grads(eager.moe_experts, *routing)
    actual, actual_grads = _with_grads(grouped_experts.moe_experts, *routing)
    tol = {"rtol": KERNEL_TOLERANCE.rtol, "atol": KERNEL_TOLERANCE.atol}
    assert torch.allclose(actual, expected, **tol)
    for name, want, got in zip(("hidden", "weights", "gate_up", "down"), expected_grads, actual_grads):
        assert torch.allclose(got, want, **tol), f"grad of {name}"


def test_grouped_experts_output_and_gradients_match_eager() -> None:
    _assert_grouped_matches_eager(*_routing())


def test_grouped_experts_match_eager_when_some_experts_get_no_tokens() -> None:
    hidden, _, weights, gate_up, down = _routing()
    index = torch.stack([torch.randperm(3, generator=torch.Generator().manual_seed(t)) for t in range(TOKENS)])
    assert set(index.unique().tolist()) == {0, 1, 2}  # experts 3.. never routed to: zero grads on both sides
    _assert_grouped_matches_eager(hidden, index, weights, gate_up, down)


def test_grouped_experts_of_no_tokens_is_empty() -> None:
    hidden, index, weights, gate_up, down = _routing(tokens=0)
    out = grouped_experts.moe_experts(hidden, index, weights, gate_up, down, "silu")
    assert out.shape == (0, HIDDEN)


def test_grouped_experts_reject_an_expert_id_out_of_range() -> None:
    hidden, index, weights, gate_up, down = _routing()
    index[0, 0] = NUM_EXPERTS
    with pytest.raises(ValueError, match=f"expert id {NUM_EXPERTS}, but there are {NUM_EXPERTS} experts"):
        grouped_experts.moe_experts(hidden, index, weights, gate_up, down, "silu")


def test_everywhere_grouped_binds_only_the_experts_slot() -> None:
    assert dict(OpsConfig.everywhere("grouped").kernels) == {"moe_experts": "grouped"}


def _layer_logits(layers: int = 3, batch: int = 2, seq: int = 5) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(7)
    return tuple(torch.randn(batch * seq, NUM_EXPERTS, generator=generator) for _ in range(layers))


@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "padding-mask"])
def test_eager_load_balancing_loss_is_upstreams(masked: bool) -> None:
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]) if masked else None
    logits = _layer_logits()
    expected = load_balancing_loss_func(logits, NUM_EXPERTS, TOP_K, mask)
    assert torch.equal(eager.load_balancing_loss(logits, NUM_EXPERTS, TOP_K, mask), expected)


@pytest.mark.parametrize("router_logits", [None, ()], ids=["none", "empty-tuple"])
def test_eager_load_balancing_loss_without_router_logits_is_the_int_zero(router_logits) -> None:
    loss = eager.load_balancing_loss(router_logits, NUM_EXPERTS, TOP_K, None)
    assert loss == 0 and isinstance(loss, int)


def _upstream_experts(model: str):
    """An upstream experts module in eager mode at this file's sizes, and the contract keywords that match it."""
    if model == "gpt_oss":
        from transformers import GptOssConfig
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

        config = GptOssConfig(
            hidden_size=HIDDEN,
            intermediate_size=INTERMEDIATE,
            num_local_experts=NUM_EXPERTS,
            experts_implementation="eager",
        )
        experts = GptOssExperts(config)
        options = {"layout": "transposed", "interleaved": True, "limit": experts.limit, "alpha": experts.alpha}
        return experts, options
    if model == "deepseek_v4":
        from transformers import DeepseekV4Config
        from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Experts

        config = DeepseekV4Config(
            hidden_size=HIDDEN,
            intermediate_size=INTERMEDIATE,
            num_local_experts=NUM_EXPERTS,
            swiglu_limit=0.5,
            experts_implementation="eager",
        )
        return DeepseekV4Experts(config), {"limit": 0.5}
    from transformers import DeepseekV3Config, MixtralConfig
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Experts
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    config_cls, experts_cls = {
        "mixtral": (MixtralConfig, MixtralExperts),
        "deepseek_v3": (DeepseekV3Config, DeepseekV3Experts),
    }[model]
    config = config_cls(
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        moe_intermediate_size=INTERMEDIATE,
        num_local_experts=NUM_EXPERTS,
        n_routed_experts=NUM_EXPERTS,
        experts_implementation="eager",
    )
    return experts_cls(config), {}


@pytest.mark.parametrize("model", ["gpt_oss", "deepseek_v4", "mixtral", "deepseek_v3"])
def test_eager_experts_reference_is_each_upstream_loop_bitwise(model: str) -> None:
    """Each keyword set of the contract recomputes its model's upstream formula exactly (random biases included)."""
    experts, options = _upstream_experts(model)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in experts.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    hidden, index, weights, _, _ = _routing()
    tensors = {name: getattr(experts, name, None) for name in ("gate_up_proj_bias", "down_proj_bias")}
    with torch.no_grad():
        expected = experts(hidden, index, weights)
        actual = eager.moe_experts(
            hidden,
            index,
            weights,
            experts.gate_up_proj,
            experts.down_proj,
            experts.config.hidden_act,
            gate_up_bias=tensors["gate_up_proj_bias"],
            down_bias=tensors["down_proj_bias"],
            **options,
        )
    assert torch.equal(actual, expected)
