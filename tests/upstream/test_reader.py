"""The upstream reader on real pinned modeling files: one behaviour per test, one model showing it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from modelgraft.generator.errors import UpstreamError
from modelgraft.generator.recipes.fit import fit_model
from modelgraft.generator.recipes.render import recipe_call
from modelgraft.generator.upstream.reader import read_model
from modelgraft.generator.upstream.structure import ModelStructure

from .readings import read_model as pinned_reading

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts


def read(model: str) -> ModelStructure:
    """The pinned transformers' reading of ``model``, shared with the other upstream tests of the process
    (readings.py); the tests of reading itself below call ``read_model``."""
    return pinned_reading(model)


def norm(model: str, cls: str):
    return next(n for n in read(model).norms if n.cls == cls)


def mlp(model: str, cls: str):
    return next(m for m in read(model).mlps if m.cls == cls)


# --- prefix, config, heads -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "prefix"),
    [("smollm3", "SmolLM3"), ("ernie4_5", "Ernie4_5"), ("hunyuan_v1_dense", "HunYuanDenseV1"), ("phimoe", "Phimoe")],
)
def test_prefix_comes_from_the_class_names_not_the_package(model: str, prefix: str) -> None:
    assert read(model).prefix == prefix


def test_llama_reads_config_class_model_type_and_dataclass_defaults() -> None:
    s = read("llama")
    assert (s.config_class, s.model_type) == ("LlamaConfig", "llama")
    assert s.config_defaults["vocab_size"] == "32000"
    assert s.config_defaults["initializer_range"] == "0.02"


def test_gemma3_causal_lm_uses_the_text_sub_config() -> None:
    s = read("gemma3")
    assert (s.config_class, s.model_type) == ("Gemma3TextConfig", "gemma3_text")


def test_llama_has_all_four_heads_and_generic_sequence_classification() -> None:
    s = read("llama")
    assert set(s.heads) == {"causal_lm", "sequence_classification", "token_classification", "question_answering"}
    assert s.sequence_classification is not None and s.sequence_classification.generic


# --- causal LM head -------------------------------------------------------------------------------


def test_llama_loss_head_is_guardable_with_config_vocab_size() -> None:
    lm = read("llama").causal_lm
    assert lm is not None and lm.reason == ""
    # The pinned transformers slices first (`hidden_states = slice_logits_to_keep(hidden_states, logits_to_keep)`),
    # then projects the sliced hidden states.
    assert (lm.logits_var, lm.hidden_arg) == ("logits", "hidden_states")
    assert lm.vocab_size_expr == "self.config.vocab_size"
    assert lm.output_class == "CausalLMOutputWithPast"
    assert "logits_to_keep" in lm.params


def test_gemma2_softcapping_is_a_recognised_postprocess_step() -> None:
    s = read("gemma2")
    assert s.causal_lm.postprocess == (("softcap", "self.config.final_logit_softcapping"),)
    assert s.causal_lm.reason == ""
    assert s.multipliers.final_logit_softcapping


def test_beam_softcapping_in_fp32_is_its_own_postprocess_step() -> None:
    """Beam (pinned transformers) upcasts the logits before the soft-cap; the head must keep them fp32."""
    s = read("beam")
    assert s.causal_lm.postprocess == (("softcap_fp32", "self.config.final_logit_softcapping"),)
    assert s.causal_lm.reason == ""
    assert s.multipliers.final_logit_softcapping


def test_beam_recipe_declares_the_fp32_softcap_on_its_loss_head() -> None:
    _, call = recipe_call("moe", "Beam", fit_model(read("beam")).arguments)
    assert (
        'LossHead("BeamForCausalLM", softcap="self.config.final_logit_softcapping", scale=(), softcap_fp32=True)'
        in (" ".join(call.split()))
    )


def test_granite_logits_scaling_and_multipliers() -> None:
    s = read("granite")
    assert s.causal_lm.postprocess == (("scale_div", "self.config.logits_scaling"),)
    assert s.multipliers.embedding == "self.embedding_multiplier"
    assert s.multipliers.residual == "self.residual_multiplier"
    assert s.multipliers.logits == "self.config.logits_scaling"


def test_gemma_embedding_normalizer_is_read_from_the_scaled_embedding() -> None:
    assert read("gemma").multipliers.embedding == "self.config.hidden_size ** 0.5"


def test_qwen2_moe_loss_passes_vocab_positionally_and_names_aux_loss_function() -> None:
    lm = read("qwen2_moe").causal_lm
    assert lm.vocab_size_expr == "self.vocab_size"
    assert lm.aux_loss_function == "load_balancing_loss_func"
    assert lm.output_class == "MoeCausalLMOutputWithPast"


def test_lm_head_with_bias_is_reported_and_guardable() -> None:
    lm = read("phi").causal_lm
    assert lm.lm_head_bias
    assert lm.reason == ""


def test_output_projection_under_another_name_is_found() -> None:
    lm = read("biogpt").causal_lm
    assert (lm.head_attr, lm.reason) == ("output_projection", "")


def test_an_lm_head_class_with_its_own_forward_keeps_the_loss_unguarded_naming_it() -> None:
    lm = read("dory").causal_lm
    assert "self.lm_head is DoryLMHead (line " in lm.reason
    assert "whose own forward (line " in lm.reason


def test_neutral_methods_and_a_scale_on_the_lm_head_call_are_read() -> None:
    assert read("opt").causal_lm.reason == ""
    assert read("hyperclovax").causal_lm.postprocess == (("scale_mul", "self.config.logits_scaling"),)


# --- norms ----------------------------------------------------------------------------------------


def test_llama_norm_is_rms_weight_with_its_attributes() -> None:
    n = norm("llama", "LlamaRMSNorm")
    assert (n.kind, n.param, n.weight_attr, n.eps_attr) == (
        "rms_weight",
        "hidden_states",
        "weight",
        "variance_epsilon",
    )


def test_gemma_norm_is_one_plus_weight_with_eps_from_norm_helper() -> None:
    n = norm("gemma", "GemmaRMSNorm")
    assert (n.kind, n.param, n.eps_attr) == ("rms_one_plus_weight", "x", "eps")


def test_olmo2_norm_casts_last() -> None:
    assert norm("olmo2", "Olmo2RMSNorm").kind == "rms_weight_cast_last"


def test_olmo_norm_is_an_upcast_weightless_layer_norm() -> None:
    n = norm("olmo", "OlmoLayerNorm")
    assert (n.kind, n.weight_attr, n.eps_value, n.upcast) == ("layer_norm", None, "1e-05", True)


def test_cohere_hand_written_layer_norm_is_unknown_with_reason() -> None:
    n = norm("cohere", "CohereLayerNorm")
    assert n.kind == "unknown" and n.reason


def test_opt_layer_norms_called_on_either_side_of_do_layer_norm_before_are_call_sites() -> None:
    # Each is called in two assignments of its own, before its block or after it.
    layer, _ = read("opt").call_sites
    assert (layer.cls, layer.layer_norms) == ("OPTDecoderLayer", ("self_attn_layer_norm", "final_layer_norm"))


def test_opt_decoder_s_final_norm_built_or_set_to_none_is_a_call_site() -> None:
    _, decoder = read("opt").call_sites
    assert (decoder.cls, decoder.layer_norms) == ("OPTDecoder", ("final_layer_norm",))


# --- MLPs -----------------------------------------------------------------------------------------


def test_llama_mlp_is_gated_with_activation_expression() -> None:
    m = mlp("llama", "LlamaMLP")
    assert (m.kind, m.gate_attr, m.up_attr, m.down_attr) == ("gated", "gate_proj", "up_proj", "down_proj")
    assert (m.act_attr, m.activation_config_attr, m.activation_expr) == (
        "act_fn",
        "hidden_act",
        "self.config.hidden_act",
    )


def test_lfm2_gated_mlp_records_which_attribute_plays_which_role() -> None:
    m = mlp("lfm2", "Lfm2MLP")
    assert (m.kind, m.gate_attr, m.up_attr, m.down_attr) == ("gated", "w1", "w3", "w2")


@pytest.mark.parametrize("model", ["phi3", "glm"])
def test_fused_gate_up_mlp(model: str) -> None:
    m = read(model).mlps[0]
    assert (m.kind, m.gate_attr, m.up_attr, m.down_attr) == ("fused_gate_up", "gate_up_proj", None, "down_proj")


def test_arcee_mlp_is_plain() -> None:
    m = mlp("arcee", "ArceeMLP")
    assert (m.kind, m.up_attr, m.down_attr) == ("plain", "up_proj", "down_proj")


def test_starcoder2_plain_mlp_with_c_fc_and_trailing_dropout() -> None:
    m = mlp("starcoder2", "Starcoder2MLP")
    assert (m.kind, m.up_attr, m.down_attr, m.residual_dropout) == ("plain", "c_fc", "c_proj", True)
    assert m.activation_expr is None  # the MLP keeps no self.config


def test_seed_oss_gated_mlp_has_residual_dropout() -> None:
    m = mlp("seed_oss", "SeedOssMLP")
    assert (m.kind, m.residual_dropout) == ("gated", True)
    assert "self.residual_dropout" in m.dropout_expr


# --- rope -----------------------------------------------------------------------------------------


def test_llama_rope_is_rotate_half_function() -> None:
    r = read("llama").rope
    assert (r.kind, r.name, r.formulation) == ("function", "apply_rotary_pos_emb", "rotate_half")
    assert r.params == ("q", "k", "cos", "sin", "unsqueeze_dim")


def test_gpt_neox_partial_rotary_is_recognised() -> None:
    assert read("gpt_neox").rope.formulation == "rotate_half_partial"


def test_olmo_cast_back_rotary_is_recognised() -> None:
    assert read("olmo").rope.formulation == "rotate_half_cast_back"


def test_interleaved_rotary_variants_are_recognised() -> None:
    assert read("helium").rope.formulation == "interleaved"
    assert read("glm").rope.formulation == "interleaved_partial"
    assert read("ernie4_5").rope.formulation == "interleaved_upcast"
    assert read("cohere").rope.formulation == "interleaved_pairs_upcast"


def test_phi3_rotary_with_its_own_partial_form_is_unknown_with_reason() -> None:
    r = read("phi3").rope
    assert r.formulation == "unknown" and "partial" in r.reason


def test_deepseek_v2_has_no_module_level_apply_rotary_pos_emb() -> None:
    r = read("deepseek_v2").rope
    assert (r.name, r.formulation) == ("apply_rotary_emb", "unknown")


def test_gpt_neo_has_no_rope() -> None:
    assert read("gpt_neo").rope.kind == "none"


# --- categories -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "category"),
    [
        ("llama", "dense"),
        ("qwen3", "dense"),
        ("qwen3_moe", "moe"),
        ("qwen2_vl", "vlm"),
        ("qwen3_vl", "vlm"),
        ("qwen3_vl_moe", "vlm_moe"),
        ("qwen2_5_omni", "omni"),
        ("qwen3_omni_moe", "omni_moe"),
    ],
)
def test_category_of_reference_models(model: str, category: str) -> None:
    assert read(model).category == category


@pytest.mark.parametrize(
    ("model", "word"),
    [("bert", "encoder"), ("mamba", "Mixer"), ("trocr", "encoder"), ("gemma4_assistant", "takes no labels")],
)
def test_out_of_category_names_why(model: str, word: str) -> None:
    s = read(model)
    assert s.category == "out_of_category" and word in s.category_reason


@pytest.mark.parametrize(("model", "head"), [("gpt2", "GPT2LMHeadModel"), ("openai", "OpenAIGPTLMHeadModel")])
def test_a_causal_lm_named_otherwise_is_the_class_the_auto_causal_lm_table_names(model: str, head: str) -> None:
    s = read(model)
    assert (s.category, s.causal_lm.cls) == ("dense", head)


def test_gpt2_s_recipe_puts_its_lm_head_model_s_loss_behind_the_slot() -> None:
    fitted = fit_model(read("gpt2"))
    _, call = recipe_call("dense", "GPT2", fitted.arguments)
    assert not fitted.refused
    assert 'LossHead("GPT2LMHeadModel", softcap="", scale=())' in " ".join(call.split())


@pytest.mark.parametrize("model", ["gpt2", "gpt_bigcode", "xglm"])
def test_cross_attention_behind_add_cross_attention_leaves_a_decoder_only_model(model: str) -> None:
    assert read(model).category == "dense"


def test_a_cross_attention_flag_the_causal_lm_switches_on_is_an_encoder_decoder_s_decoder() -> None:
    # TrOCRConfig.is_decoder defaults to False; TrOCRForCausalLM sets it before building its decoder.
    assert "encoder_hidden_states" in read("trocr").category_reason


def test_xlm_attends_both_ways_unless_configured_causal() -> None:
    s = read("xlm")
    assert s.category == "out_of_category" and "follows config.causal" in s.category_reason


def test_xlnet_is_a_permutation_language_model() -> None:
    s = read("xlnet")
    assert s.category == "out_of_category" and "perm_mask" in s.category_reason


def test_qwen3_omni_moe_lm_is_the_thinker() -> None:
    assert read("qwen3_omni_moe").causal_lm.cls == "Qwen3OmniMoeThinkerForConditionalGeneration"


# --- MoE ------------------------------------------------------------------------------------------


def test_qwen2_moe_shared_expert_is_gated() -> None:
    moe = read("qwen2_moe").moe
    assert moe.shared_experts.attr == "shared_expert" and moe.shared_experts.gated
    assert moe.dense_layers == "mlp_only_layers, decoder_sparse_step"


def test_qwen3_moe_block_router_and_experts() -> None:
    moe = read("qwen3_moe").moe
    assert (moe.sparse_block, moe.experts_call) == ("Qwen3MoeSparseMoeBlock", True)
    assert moe.router.kind == "softmax_topk"
    assert (moe.experts.layout, moe.experts.activation_expr) == ("gate_up", "self.experts.config.hidden_act")
    assert (moe.num_experts_attr, moe.top_k_attr, moe.intermediate_attr) == (
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
    )


def test_experts_whose_act_fn_is_a_functional_activation_name_it_literally() -> None:
    """lfm2_moe's experts hold ``self.act_fn = F.silu``: the same function as ``ACT2FN["silu"]``, whatever the config."""
    experts = read("lfm2_moe").moe.experts
    assert (experts.cls, experts.layout, experts.activation_expr) == ("Lfm2MoeExperts", "gate_up", '"silu"')


def test_mixtral_counts_experts_with_num_local_experts() -> None:
    moe = read("mixtral").moe
    assert moe.num_experts_attr == "num_local_experts"
    assert moe.router.kind == "softmax_topk"


def test_deepseek_v3_sigmoid_group_limited_router_with_dense_first_layers() -> None:
    moe = read("deepseek_v3").moe
    assert moe.router.kind == "sigmoid_group_limited"
    assert (moe.dense_layers, moe.dense_mlp) == ("first_k_dense_replace", "DeepseekV3MLP")
    assert moe.shared_experts.attr == "shared_experts" and not moe.shared_experts.gated


def test_gpt_oss_experts_are_interleaved_with_bias_and_custom_activation() -> None:
    e = read("gpt_oss").moe.experts
    assert (e.layout, e.has_bias, e.custom_activation) == ("interleaved", True, True)


def test_gpt_oss_top_k_before_softmax_router_is_recognised() -> None:
    assert read("gpt_oss").moe.router.kind == "topk_softmax"


@pytest.mark.parametrize(("model", "block"), [("dots1", "Dots1MoE"), ("glm4_moe", "Glm4MoeMoE")])
def test_sparse_block_is_the_class_holding_experts(model: str, block: str) -> None:
    assert read(model).moe.sparse_block == block


def test_olmoe_has_no_shared_experts_or_dense_layers() -> None:
    moe = read("olmoe").moe
    assert (moe.shared_experts, moe.dense_layers) == (None, None)
    assert moe.router.kind == "softmax_topk"


def test_dense_model_has_no_moe() -> None:
    assert read("llama").moe is None


# --- errors, determinism, no imports --------------------------------------------------------------


def test_unknown_model_raises_upstream_error_naming_it() -> None:
    with pytest.raises(UpstreamError, match="no_such_model"):
        read_model("no_such_model")


def test_package_without_modeling_file_raises_upstream_error(tmp_path) -> None:
    (tmp_path / "transformers" / "models" / "empty").mkdir(parents=True)
    with pytest.raises(UpstreamError, match="modeling_empty.py"):
        read_model("empty", root=tmp_path)


def test_reading_twice_gives_equal_reports() -> None:
    assert read_model("qwen3_moe").to_dict() == read_model("qwen3_moe").to_dict()


def test_reader_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys\n"
        "from modelgraft.generator.upstream.reader import read_model\n"
        "read_model('qwen3_moe'); read_model('gemma3')\n"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
