"""The MoE benchmark's sizes reach every sparse model of the registry, under that model's own config keys.

A model joins the benchmark by being registered; these tests catch one whose config the shared sizes
cannot build, or whose experts end up at another width (an alias or a key the sizes miss), without
running the benchmark itself.
"""

from __future__ import annotations

import pytest

from benchmarks.moe_bench import _prepare, sparse_models
from benchmarks.moe_sizes import SMOKE_SIZES, MoeSizes


@pytest.mark.parametrize("model_type", sparse_models())
def test_every_sparse_model_builds_with_experts_at_the_benchmark_width(model_type: str) -> None:
    config, _, generated, _ = _prepare(model_type, SMOKE_SIZES)
    experts = [t for name, t in generated(config).named_parameters() if name.endswith("experts.gate_up_proj")]
    assert experts, f"{model_type}: no routed experts at the benchmark's sizes"
    e, h, i = SMOKE_SIZES.num_experts, SMOKE_SIZES.hidden_size, SMOKE_SIZES.moe_intermediate_size
    assert {tuple(t.shape) for t in experts} <= {(e, 2 * i, h), (e, h, 2 * i)}


def test_the_expert_width_goes_where_each_model_keeps_it() -> None:
    sizes = MoeSizes()
    qwen = sizes.config_overrides({"hidden_size": 0, "intermediate_size": 0, "moe_intermediate_size": 0})
    assert (qwen["moe_intermediate_size"], qwen["intermediate_size"]) == (192, 1024)  # dense layers: 2 H
    gpt_oss = sizes.config_overrides({"hidden_size": 0, "intermediate_size": 0, "num_local_experts": 0})
    assert (gpt_oss["intermediate_size"], gpt_oss["num_local_experts"]) == (192, 64)
    aliased = sizes.config_overrides({"moe_intermediate_size": 0}, {"intermediate_size": "moe_intermediate_size"})
    assert aliased["intermediate_size"] == aliased["moe_intermediate_size"] == 192


def test_latent_attention_gets_ranks_and_head_dims_instead_of_a_head_dim() -> None:
    keys = {"kv_lora_rank": 0, "q_lora_rank": 0, "qk_rope_head_dim": 0, "qk_nope_head_dim": 0, "v_head_dim": 0}
    mla = MoeSizes().config_overrides({**keys, "num_key_value_heads": 0, "n_group": 8, "topk_group": 0})
    assert mla["head_dim"] == mla["qk_rope_head_dim"] == 32
    assert (mla["kv_lora_rank"], mla["q_lora_rank"], mla["num_key_value_heads"]) == (64, 128, 8)
    assert (mla["n_group"], mla["topk_group"]) == (8, 4)  # 64 experts: groups of 8, half of them kept


def test_low_rank_widths_the_sizes_do_not_name_keep_the_class_share_of_its_hidden_size() -> None:
    v4 = MoeSizes().config_overrides({"hidden_size": 4096, "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8})
    assert (v4["q_lora_rank"], v4["o_lora_rank"]) == (128, 128)
    assert "o_groups" not in v4


def test_latent_attention_ranks_win_over_the_scaled_class_defaults() -> None:
    mla = MoeSizes().config_overrides({"hidden_size": 7168, "kv_lora_rank": 512, "q_lora_rank": 1536})
    assert (mla["kv_lora_rank"], mla["q_lora_rank"]) == (64, 128)


def test_plain_attention_models_run_upstream_sdpa_on_both_sides() -> None:
    config, _, _, generated_attention = _prepare("qwen3_moe", SMOKE_SIZES)
    assert config._attn_implementation == generated_attention == "sdpa"


@pytest.mark.parametrize(("model_type", "attention"), [("qwen3_moe", "sdpa"), ("gpt_oss", "eager")])
def test_train_steps_run_the_attention_upstream_would_pick(model_type: str, attention: str) -> None:
    config, upstream, _, _ = _prepare(model_type, SMOKE_SIZES)
    assert config._attn_implementation == attention == upstream(config).config._attn_implementation


def test_mla_models_run_fused_attention_on_the_generated_side() -> None:
    config, _, _, generated_attention = _prepare("deepseek_v3", SMOKE_SIZES)
    assert (config._attn_implementation, generated_attention) == ("sdpa", "fused_attention")


@pytest.mark.parametrize("model_type", ["gpt_oss", "deepseek_v4"])
def test_sink_models_run_fused_attention_against_upstream_eager(model_type: str) -> None:
    config, _, _, generated_attention = _prepare(model_type, SMOKE_SIZES)
    assert (config._attn_implementation, generated_attention) == ("eager", "fused_attention")


def test_dsa_models_run_upstreams_sdpa_against_the_generated_fused_attention() -> None:
    """The pinned transformers' GLM-MoE-DSA masks sdpa's boolean masks as booleans, so its default is compared."""
    config, upstream, _, generated_attention = _prepare("glm_moe_dsa", SMOKE_SIZES)
    assert upstream._supports_sdpa
    assert (config._attn_implementation, generated_attention) == ("sdpa", "fused_attention")
