"""The correction-bias update of auxiliary-loss-free balancing (``modelgraft.models.expert_balance``).

DeepSeek-V3, GLM-MoE-DSA and DeepSeek-V4 route by ``score + e_score_correction_bias`` and output no
router logits; training moves the bias against each expert's load. These tests pin the counting (the
experts each router's forward selected), the update rule, its reduction over ranks, and that repeated
updates balance a skewed router.
"""

from __future__ import annotations

import pytest
import torch
from transformers import DeepseekV3Config

from modelgraft.models.distributed.launch import spawn
from modelgraft.models.expert_balance import ExpertBalancer, biased_routers
from modelgraft.models.loader import get_model_class
from modelgraft.models.testing import causal_lm_batch, seed_everything
from modelgraft.models.testing.tiny import tiny_config_for

MODELS = [
    pytest.param("deepseek_v3", "DeepseekV3ForCausalLM", id="deepseek_v3"),
    pytest.param("glm_moe_dsa", "GlmMoeDsaForCausalLM", id="glm_moe_dsa"),
    pytest.param("deepseek_v4", "DeepseekV4ForCausalLM", id="deepseek_v4"),
]


def tiny_model(model_type: str = "deepseek_v3", architecture: str = "DeepseekV3ForCausalLM", *, seed: int = 0):
    from modelgraft.models import MODEL_CONFIG_REGISTRY

    config = tiny_config_for(MODEL_CONFIG_REGISTRY[model_type])
    seed_everything(seed)
    return get_model_class(model_type, architecture)(config).eval(), config


def selected_experts(model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
    """Each biased router's selected expert ids, captured from its own output."""
    found: dict[str, torch.Tensor] = {}

    def capture(name: str):
        def hook(module: torch.nn.Module, args: object, output: tuple[torch.Tensor, ...]) -> None:
            found[name] = output[2].clone()

        return hook

    hooks = [router.register_forward_hook(capture(name)) for name, router in biased_routers(model).items()]
    with torch.no_grad():
        model(**batch, use_cache=False)
    for hook in hooks:
        hook.remove()
    return found


@pytest.mark.parametrize(("model_type", "architecture"), MODELS)
def test_counts_are_the_experts_each_router_selected(model_type: str, architecture: str) -> None:
    model, config = tiny_model(model_type, architecture)
    batch = causal_lm_batch(config, batch_size=2, seq_len=8, seed=0)
    expected = selected_experts(model, batch)
    assert expected, f"{model_type}: no biased router ran"
    with ExpertBalancer(model) as balancer, torch.no_grad():
        model(**batch, use_cache=False)
        counts = balancer.counts
    assert set(counts) == set(expected)
    for name, indices in expected.items():
        assert torch.equal(counts[name], torch.bincount(indices.reshape(-1), minlength=counts[name].numel()).double())


def test_inside_real_tokens_only_the_unmasked_tokens_are_counted() -> None:
    model, config = tiny_model()
    batch = causal_lm_batch(config, batch_size=2, seq_len=8, seed=0)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, :3] = 0  # left padding in the first row
    mask[1, 6:] = 0  # right padding in the second
    selected = selected_experts(model, {**batch, "attention_mask": mask})
    balancer = ExpertBalancer(model)
    with balancer.real_tokens(mask), torch.no_grad():
        model(**{**batch, "attention_mask": mask}, use_cache=False)
    real = mask.reshape(-1).bool()
    for name, indices in selected.items():
        counts = balancer.counts[name]
        assert torch.equal(counts, torch.bincount(indices[real].reshape(-1), minlength=counts.numel()).double())
        assert counts.sum() == real.sum() * indices.shape[1]


def test_a_real_token_mask_that_does_not_cover_the_routed_tokens_is_refused() -> None:
    model, config = tiny_model()
    batch = causal_lm_batch(config, batch_size=2, seq_len=8, seed=0)
    balancer = ExpertBalancer(model)
    refused = pytest.raises(ValueError, match=r"mask of shape \(2, 4\) has 8 entries, but the router routed 16 tokens")
    with balancer.real_tokens(torch.ones(2, 4)), torch.no_grad(), refused:
        model(**batch, use_cache=False)


def test_counting_every_token_resumes_after_the_real_tokens_block() -> None:
    model, config = tiny_model()
    batch = causal_lm_batch(config, batch_size=2, seq_len=8, seed=0)
    balancer = ExpertBalancer(model)
    with balancer.real_tokens(torch.zeros(2, 8)), torch.no_grad():
        model(**batch, use_cache=False)
    assert all(not counts.any() for counts in balancer.counts.values())
    with torch.no_grad():
        model(**batch, use_cache=False)
    top_k = config.num_experts_per_tok
    assert all(counts.sum() == 16 * top_k for counts in balancer.counts.values())


def test_counts_accumulate_over_forward_passes_until_an_update() -> None:
    model, config = tiny_model()
    batch = causal_lm_batch(config, batch_size=2, seq_len=8, seed=0)
    balancer = ExpertBalancer(model)
    with torch.no_grad():
        model(**batch, use_cache=False)
        once = balancer.counts
        model(**batch, use_cache=False)
    assert all(torch.equal(balancer.counts[name], 2 * once[name]) for name in once)
    balancer.update(rate=1e-3)
    assert all(not counts.any() for counts in balancer.counts.values())


def test_update_raises_underloaded_and_lowers_overloaded_biases_by_the_rate() -> None:
    model, _ = tiny_model()
    balancer = ExpertBalancer(model)
    name, router = next(iter(balancer.routers.items()))
    num_experts = router.e_score_correction_bias.numel()
    load = torch.arange(num_experts, dtype=torch.float64)  # mean (E - 1) / 2: the lower half is underloaded
    balancer._counts[name].copy_(load)
    before = router.e_score_correction_bias.clone()
    loads = balancer.update(rate=0.25)
    step = router.e_score_correction_bias - before
    assert torch.equal(loads[name], load)
    assert torch.equal(step, torch.sign(load.mean() - load).float() * 0.25)


def test_an_expert_at_the_mean_load_keeps_its_bias() -> None:
    model, _ = tiny_model()
    balancer = ExpertBalancer(model)
    name, router = next(iter(balancer.routers.items()))
    balancer._counts[name].fill_(3.0)
    before = router.e_score_correction_bias.clone()
    balancer.update(rate=1.0)
    assert torch.equal(router.e_score_correction_bias, before)


def test_repeated_updates_even_out_a_skewed_router() -> None:
    model, config = tiny_model()
    batch = causal_lm_batch(config, batch_size=4, seq_len=16, seed=1)
    routers = biased_routers(model)
    with torch.no_grad():
        for router in routers.values():  # a strong preference for the first experts
            skew = torch.linspace(1.0, 0.0, router.e_score_correction_bias.numel())
            router.e_score_correction_bias.copy_(skew)

    def spread(loads: dict[str, torch.Tensor]) -> float:
        """The largest coefficient of variation of a router's loads (0: perfectly balanced)."""
        return max((load.std() / load.mean()).item() for load in loads.values())

    balancer = ExpertBalancer(model)
    history = []
    with torch.no_grad():
        for _ in range(40):
            model(**batch, use_cache=False)
            history.append(spread(balancer.update(rate=0.02)))
    # A sign update oscillates around balance by about the rate, so judge the last ten steps together.
    assert sum(history[-10:]) / 10 < 0.5 * history[0], history


def test_a_model_without_biased_routers_is_refused_by_name() -> None:
    model, _ = tiny_model("qwen3_moe", "Qwen3MoeForCausalLM")
    with pytest.raises(ValueError, match=r"Qwen3MoeForCausalLM has no router with an 'e_score_correction_bias'"):
        ExpertBalancer(model)


@pytest.mark.parametrize("rate", [0.0, -1e-3, float("nan")])
def test_a_rate_that_is_not_positive_is_refused(rate: float) -> None:
    model, _ = tiny_model()
    with pytest.raises(ValueError, match="rate must be a positive number"):
        ExpertBalancer(model).update(rate)


def test_remove_stops_the_counting() -> None:
    model, config = tiny_model()
    batch = causal_lm_batch(config, batch_size=2, seq_len=8, seed=0)
    balancer = ExpertBalancer(model)
    balancer.remove()
    with torch.no_grad():
        model(**batch, use_cache=False)
    assert all(not counts.any() for counts in balancer.counts.values())


def _two_ranks_update_as_one_process() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model, config = tiny_model()
    whole = causal_lm_batch(config, batch_size=4, seq_len=8, seed=3)
    expected = _counts_of(model, whole)  # one process, the whole batch
    balancer = ExpertBalancer(model)
    with torch.no_grad():
        model(**{key: value[2 * rank : 2 * rank + 2] for key, value in whole.items()}, use_cache=False)
    loads = balancer.update(rate=0.1)
    for name, load in loads.items():
        assert torch.equal(load, expected[name]), name
        step = torch.sign(expected[name].mean() - expected[name]).float() * 0.1
        assert torch.equal(balancer.routers[name].e_score_correction_bias, step), name


def _counts_of(model: torch.nn.Module, batch: dict) -> dict[str, torch.Tensor]:
    return {
        name: torch.bincount(indices.reshape(-1), minlength=router.e_score_correction_bias.numel()).double()
        for (name, indices), router in zip(
            selected_experts(model, batch).items(), biased_routers(model).values(), strict=True
        )
    }


def test_two_data_parallel_ranks_update_every_bias_as_one_process_over_the_whole_batch() -> None:
    spawn(_two_ranks_update_as_one_process, 2, timeout=120.0)


def test_deepseek_v3_config_has_a_bias_router_per_sparse_layer() -> None:
    config = tiny_config_for(DeepseekV3Config)
    model = get_model_class("deepseek_v3", "DeepseekV3ForCausalLM")(config)
    sparse = config.num_hidden_layers - config.first_k_dense_replace
    assert len(biased_routers(model)) == sparse
