"""The softmax_topk_router and topk_softmax_router reference kernels are upstream's routers, bit for bit.

Each kernel must return exactly what every upstream router of its shape returns (softmax_topk_router with
the options of each variant: Mixtral's ``.float()`` upcast and fp32 weights, an unconditional
renormalisation): logits, weights and experts, in fp32 and in bf16, renormalised or not, and the same gradients for the hidden states, the gate
weight and (gpt_oss) its bias, through the weights and the logits alike (the logits feed the aux loss).
The argument tests use inputs where a guard's likely slip (no renormalisation, one expert fewer, no bias)
changes the result.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

from modelgraft.models.ops.kernels import eager

#: model -> (router class, config class, config name of the expert count) of the routers whose forward
#: is the softmax-top-k shape the reader binds (generator/upstream/read_moe.py, the first _ROUTER_SOFTMAX_TOPK).
SOFTMAX_TOPK = {
    "qwen3_moe": ("Qwen3MoeTopKRouter", "Qwen3MoeConfig", "num_experts"),
    "qwen2_moe": ("Qwen2MoeTopKRouter", "Qwen2MoeConfig", "num_experts"),
    "olmoe": ("OlmoeTopKRouter", "OlmoeConfig", "num_experts"),
    "flex_olmo": ("FlexOlmoTopKRouter", "FlexOlmoConfig", "num_experts"),
    "qwen3_next": ("Qwen3NextTopKRouter", "Qwen3NextConfig", "num_experts"),
}
#: model -> (router class, config class, config name of the expert count, the slot options that recompute its
#: body) of the softmax-top-k variants: always renormalised (Qwen3.5/Qwen3-VL MoE), and also upcast with
#: ``.float()`` and left fp32 (Mixtral, MiniMax); the reader returns these options (read_moe._ROUTER_SOFTMAX_TOPK).
SOFTMAX_TOPK_VARIANTS: dict[str, tuple[str, str, str, dict[str, object]]] = {
    "qwen3_5_moe": ("Qwen3_5MoeTopKRouter", "Qwen3_5MoeTextConfig", "num_experts", {"norm_topk_prob": True}),
    "qwen3_vl_moe": ("Qwen3VLMoeTextTopKRouter", "Qwen3VLMoeTextConfig", "num_experts", {"norm_topk_prob": True}),
    "mixtral": (
        "MixtralTopKRouter",
        "MixtralConfig",
        "num_local_experts",
        {"norm_topk_prob": True, "upcast": "float_call", "cast_back": False},
    ),
    "minimax": (
        "MiniMaxTopKRouter",
        "MiniMaxConfig",
        "num_local_experts",
        {"norm_topk_prob": True, "upcast": "float_call", "cast_back": False},
    ),
}
EXPERTS, TOP_K, HIDDEN = 12, 3, 20
DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


def _router(model: str, cls: str, config_cls: str, experts_name: str, **settings: object) -> nn.Module:
    """Upstream's router of ``model`` with random weights (and bias) from a fixed seed."""
    config = getattr(importlib.import_module("transformers"), config_cls)(
        hidden_size=HIDDEN, num_experts_per_tok=TOP_K, **{experts_name: EXPERTS}, **settings
    )
    router = getattr(importlib.import_module(f"transformers.models.{model}.modeling_{model}"), cls)(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in router.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator))
    return router


def _softmax_topk(model: str = "qwen3_moe", *, norm_topk_prob: bool = True) -> nn.Module:
    return _router(model, *SOFTMAX_TOPK[model], norm_topk_prob=norm_topk_prob)


def _variant(model: str) -> tuple[nn.Module, dict[str, object]]:
    """Upstream's router of a softmax-top-k variant, and the slot options its body needs."""
    cls, config_cls, experts_name, options = SOFTMAX_TOPK_VARIANTS[model]
    return _router(model, cls, config_cls, experts_name), options


def _gpt_oss() -> nn.Module:
    return _router("gpt_oss", "GptOssTopKRouter", "GptOssConfig", "num_local_experts")


def _hidden(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dtype)


def _softmax_topk_kernel(router: nn.Module, hidden: torch.Tensor, **changes: object) -> tuple[torch.Tensor, ...]:
    settings = {"top_k": router.top_k, "norm_topk_prob": router.norm_topk_prob, **changes}
    return eager.softmax_topk_router(hidden, router.weight, **settings)


def _topk_softmax_kernel(router: nn.Module, hidden: torch.Tensor, **changes: object) -> tuple[torch.Tensor, ...]:
    bias = changes.pop("bias", router.bias)
    return eager.topk_softmax_router(hidden, router.weight, bias, **{"top_k": router.top_k, **changes})


def _assert_same_outputs(expected: tuple[torch.Tensor, ...], actual: tuple[torch.Tensor, ...]) -> None:
    for what, want, got in zip(("logits", "weights", "experts"), expected, actual, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape, what
        assert torch.equal(got, want), what


def _gradients(router: nn.Module, hidden: torch.Tensor, outputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """Gradients of a loss reading both the logits and the weights (each scaled apart, so none cancels)."""
    logits, weights, _ = outputs
    loss = (weights * torch.arange(1.0, TOP_K + 1)).sum() + (logits.float() * 0.1).square().sum()
    parameters = [hidden, *router.parameters()]
    return list(torch.autograd.grad(loss, parameters))


def _routes_differently(base: tuple[torch.Tensor, ...], other: tuple[torch.Tensor, ...]) -> bool:
    """Other weights or other experts (a shape change counts): what the sparse block would compute differs."""
    return any(a.shape != b.shape or not torch.allclose(a.float(), b.float()) for a, b in zip(base[1:], other[1:]))


# -- softmax then top-k ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm_topk_prob", [True, False], ids=["renormalised", "not-renormalised"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", sorted(SOFTMAX_TOPK))
def test_softmax_topk_kernel_returns_upstreams_logits_weights_and_experts(
    model: str, dtype: torch.dtype, norm_topk_prob: bool
) -> None:
    router = _softmax_topk(model, norm_topk_prob=norm_topk_prob).to(dtype)
    hidden = _hidden((2, 7, HIDDEN), dtype)  # [B, S, H]: the kernel flattens the tokens as upstream does
    _assert_same_outputs(router(hidden), _softmax_topk_kernel(router, hidden))


@pytest.mark.parametrize("norm_topk_prob", [True, False], ids=["renormalised", "not-renormalised"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_topk_kernel_gradients_equal_upstreams(dtype: torch.dtype, norm_topk_prob: bool) -> None:
    router = _softmax_topk(norm_topk_prob=norm_topk_prob).to(dtype)
    hidden = _hidden((2, 7, HIDDEN), dtype).requires_grad_(True)
    expected = _gradients(router, hidden, router(hidden))
    actual = _gradients(router, hidden, _softmax_topk_kernel(router, hidden))
    for want, got in zip(expected, actual, strict=True):
        assert torch.equal(got, want)


def test_softmax_topk_weights_are_cast_back_to_the_logits_dtype() -> None:
    router = _softmax_topk().to(torch.bfloat16)
    logits, weights, _ = _softmax_topk_kernel(router, _hidden((5, HIDDEN), torch.bfloat16))
    assert logits.dtype == weights.dtype == torch.bfloat16


@pytest.mark.parametrize(
    "change", [{"norm_topk_prob": False}, {"top_k": TOP_K - 1}], ids=["no-renormalisation", "one-expert-fewer"]
)
def test_each_softmax_topk_argument_changes_the_routing(change: dict[str, object]) -> None:
    router = _softmax_topk(norm_topk_prob=True)
    hidden = _hidden((9, HIDDEN))
    assert _routes_differently(_softmax_topk_kernel(router, hidden), _softmax_topk_kernel(router, hidden, **change))


# -- softmax then top-k: the variants the slot's options recompute ---------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", sorted(SOFTMAX_TOPK_VARIANTS))
def test_softmax_topk_kernel_with_options_returns_each_variants_outputs(model: str, dtype: torch.dtype) -> None:
    router, options = _variant(model)
    router = router.to(dtype)
    hidden = _hidden((2, 7, HIDDEN), dtype)
    _assert_same_outputs(router(hidden), eager.softmax_topk_router(hidden, router.weight, top_k=TOP_K, **options))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", sorted(SOFTMAX_TOPK_VARIANTS))
def test_softmax_topk_kernel_with_options_gradients_equal_each_variants(model: str, dtype: torch.dtype) -> None:
    router, options = _variant(model)
    router = router.to(dtype)
    hidden = _hidden((2, 7, HIDDEN), dtype).requires_grad_(True)
    expected = _gradients(router, hidden, router(hidden))
    actual = _gradients(router, hidden, eager.softmax_topk_router(hidden, router.weight, top_k=TOP_K, **options))
    for want, got in zip(expected, actual, strict=True):
        assert torch.equal(got, want)


def test_mixtral_options_leave_the_weights_fp32() -> None:
    """Without the cast back a bf16 router hands the experts fp32 weights, as Mixtral's does."""
    router, options = _variant("mixtral")
    router = router.to(torch.bfloat16)
    logits, weights, _ = eager.softmax_topk_router(
        _hidden((5, HIDDEN), torch.bfloat16), router.weight, top_k=TOP_K, **options
    )
    assert (logits.dtype, weights.dtype) == (torch.bfloat16, torch.float32)


def test_the_cast_back_option_changes_bf16_weights() -> None:
    """cast_back is not cosmetic: the bf16 weights Qwen returns are not Mixtral's fp32 ones."""
    router = _softmax_topk().to(torch.bfloat16)
    hidden = _hidden((9, HIDDEN), torch.bfloat16)
    kept = _softmax_topk_kernel(router, hidden, cast_back=False)[1]
    cast = _softmax_topk_kernel(router, hidden)[1]
    assert kept.dtype == torch.float32 and not torch.equal(kept, cast.float())


def test_softmax_topk_refuses_an_unknown_upcast() -> None:
    router = _softmax_topk()
    with pytest.raises(ValueError, match="upcast must be one of"):
        _softmax_topk_kernel(router, _hidden((3, HIDDEN)), upcast="double")


# -- top-k then softmax (gpt_oss) ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_softmax_kernel_returns_upstreams_logits_weights_and_experts(dtype: torch.dtype) -> None:
    router = _gpt_oss().to(dtype)
    hidden = _hidden((14, HIDDEN), dtype)  # gpt_oss's sparse block hands its router [T, H]
    _assert_same_outputs(router(hidden), _topk_softmax_kernel(router, hidden))


@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_softmax_kernel_gradients_equal_upstreams(dtype: torch.dtype) -> None:
    router = _gpt_oss().to(dtype)
    hidden = _hidden((14, HIDDEN), dtype).requires_grad_(True)
    expected = _gradients(router, hidden, router(hidden))
    actual = _gradients(router, hidden, _topk_softmax_kernel(router, hidden))
    assert len(actual) == 3  # hidden states, weight and bias
    for want, got in zip(expected, actual, strict=True):
        assert torch.equal(got, want)


def test_topk_softmax_runs_in_the_logits_own_dtype() -> None:
    """No fp32 upcast: a kernel that upcast would return fp32 weights, or round differently once cast back."""
    router = _gpt_oss().to(torch.bfloat16)
    _, weights, _ = _topk_softmax_kernel(router, _hidden((14, HIDDEN), torch.bfloat16))
    assert weights.dtype == torch.bfloat16


def test_topk_softmax_weights_are_a_softmax_over_the_chosen_logits_only() -> None:
    router = _gpt_oss()
    logits, weights, experts = _topk_softmax_kernel(router, _hidden((14, HIDDEN)))
    assert torch.equal(weights, torch.softmax(logits.gather(1, experts), dim=-1))
    assert torch.allclose(weights.sum(dim=-1), torch.ones(14))


@pytest.mark.parametrize("change", [{"bias": None}, {"top_k": TOP_K - 1}], ids=["no-bias", "one-expert-fewer"])
def test_each_topk_softmax_argument_changes_the_routing(change: dict[str, object]) -> None:
    router = _gpt_oss()
    hidden = _hidden((14, HIDDEN))
    assert _routes_differently(_topk_softmax_kernel(router, hidden), _topk_softmax_kernel(router, hidden, **change))
