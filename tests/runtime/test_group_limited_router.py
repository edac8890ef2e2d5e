"""The group_limited_router reference kernel is upstream's router, and each of its arguments matters.

The kernel must return exactly what every upstream router of the shape returns (DeepSeek-V3's, and the
same code under GLM-4.5-MoE's and GLM-MoE-DSA's names): logits, weights and experts, bit for bit, with a
correction bias that changes the choice, in fp32 and from bf16 hidden states, renormalised or not, and the
same gradients. The argument tests use inputs where a guard's likely slip (no bias, no group limit, no
renormalisation, another scale) changes the result.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

from modelgraft.models.ops.kernels import eager

#: (modeling module, router class, config class) of upstream routers with the group-limited shape.
ROUTERS = {
    "deepseek_v3": (
        "transformers.models.deepseek_v3.modeling_deepseek_v3",
        "DeepseekV3TopkRouter",
        "DeepseekV3Config",
    ),
    "glm4_moe": ("transformers.models.glm4_moe.modeling_glm4_moe", "Glm4MoeTopkRouter", "Glm4MoeConfig"),
    "glm_moe_dsa": ("transformers.models.glm_moe_dsa.modeling_glm_moe_dsa", "GlmMoeDsaTopkRouter", "GlmMoeDsaConfig"),
}
#: 12 experts in 4 groups of 3, 2 groups per token, 3 experts per token: every setting has an effect.
SETTINGS = {"hidden_size": 20, "n_routed_experts": 12, "n_group": 4, "topk_group": 2, "num_experts_per_tok": 3}


def _router(model: str, *, norm_topk_prob: bool = True, routed_scaling_factor: float = 1.75) -> nn.Module:
    module, cls, config_cls = ROUTERS[model]
    config = getattr(importlib.import_module("transformers"), config_cls)(
        **SETTINGS, norm_topk_prob=norm_topk_prob, routed_scaling_factor=routed_scaling_factor
    )
    router = getattr(importlib.import_module(module), cls)(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        router.weight.copy_(torch.randn(router.weight.shape, generator=generator))
        router.e_score_correction_bias.copy_(torch.randn(12, generator=generator) * 0.5)
    return router


def _hidden(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(2, 7, 20, generator=torch.Generator().manual_seed(1)).to(dtype)


def _kernel(router: nn.Module, hidden: torch.Tensor, **changes: object) -> tuple[torch.Tensor, ...]:
    settings = {
        "top_k": router.top_k,
        "n_group": router.num_group,
        "topk_group": router.topk_group,
        "norm_topk_prob": router.norm_topk_prob,
        "routed_scaling_factor": router.routed_scaling_factor,
    }
    bias = changes.pop("bias", router.e_score_correction_bias)
    return eager.group_limited_router(hidden, router.weight, bias, **{**settings, **changes})


@pytest.mark.parametrize("norm_topk_prob", [True, False], ids=["renormalised", "not-renormalised"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("model", sorted(ROUTERS))
def test_kernel_returns_upstreams_logits_weights_and_experts(
    model: str, dtype: torch.dtype, norm_topk_prob: bool
) -> None:
    router = _router(model, norm_topk_prob=norm_topk_prob).to(dtype)
    hidden = _hidden(dtype)
    expected, actual = router(hidden), _kernel(router, hidden)
    for what, want, got in zip(("logits", "weights", "experts"), expected, actual, strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want), what


def test_kernel_gradients_equal_upstreams() -> None:
    router = _router("deepseek_v3")
    hidden = _hidden().requires_grad_(True)
    _, weights, _ = router(hidden)
    (weights * torch.arange(3.0)).sum().backward()
    expected = (hidden.grad.clone(), router.weight.grad.clone())
    hidden.grad, router.weight.grad = None, None
    _, weights, _ = _kernel(router, hidden)
    (weights * torch.arange(3.0)).sum().backward()
    assert torch.equal(hidden.grad, expected[0]) and torch.equal(router.weight.grad, expected[1])


def test_experts_come_only_from_the_best_groups() -> None:
    router = _router("deepseek_v3")
    _, _, experts = _kernel(router, _hidden())
    groups = (experts // 3).tolist()  # 3 experts per group
    assert all(len(set(row)) <= 2 for row in groups)
    _, _, unlimited = _kernel(router, _hidden(), topk_group=4)
    assert any(len(set(row)) == 3 for row in (unlimited // 3).tolist())  # without the limit, some token spreads


def test_the_bias_picks_the_experts_but_not_their_weights() -> None:
    router = _router("deepseek_v3", norm_topk_prob=False, routed_scaling_factor=1.0)
    hidden = _hidden()
    logits, weights, experts = _kernel(router, hidden)
    _, _, unbiased = _kernel(router, hidden, bias=torch.zeros(12))
    assert not torch.equal(experts, unbiased)
    assert torch.equal(weights, logits.sigmoid().gather(1, experts))


@pytest.mark.parametrize(
    "change",
    [
        {"bias": torch.zeros(12)},
        {"topk_group": 4},
        {"norm_topk_prob": False},
        {"routed_scaling_factor": 2.5},
        {"n_group": 2},
    ],
    ids=["no-bias", "no-group-limit", "no-renormalisation", "default-scale", "other-group-count"],
)
def test_each_argument_changes_the_routing(change: dict[str, object]) -> None:
    router = _router("deepseek_v3")
    hidden = _hidden()
    base = _kernel(router, hidden)
    other = _kernel(router, hidden, **dict(change))
    assert not (torch.equal(base[1], other[1]) and torch.equal(base[2], other[2]))
