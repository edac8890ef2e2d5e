"""``modelgraft.models.testing.tiny.tiny_config_for`` on every decoder-only text model of transformers.

The population is every model_type of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` except those in
:data:`EXCLUDED` (encoders and encoder-decoders, VLM / omni composites, SSM and linear-attention
hybrids, each with its reason). For each model the upstream causal LM is built from the tiny config,
fp32 and a fixed seed, and runs one forward with labels on a 2 x 11 batch and a backward: the loss is
finite, every trainable parameter gets a gradient (except :data:`NO_GRAD_BY_DESIGN`), the model is small,
and the dims that become weight shapes are pairwise distinct.
"""

from __future__ import annotations

import copy
import itertools
import logging
import math
import re
import warnings

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from modelgraft.models.testing.batches import causal_lm_batch
from modelgraft.models.testing.seed import seed_everything
from modelgraft.models.testing.tiny import AUX_LOSS_COEF, MODEL_OVERRIDES, TINY, tiny_config_for, weight_dims

_ENCODER = "encoder or encoder-decoder (bidirectional attention / cross-attention LM head), not a decoder-only model"
_COMPOSITE = "VLM / omni / multi-part composite config (vision, audio or patcher sub-configs)"
_RECURRENT = "SSM / recurrent or linear-attention hybrid (recurrent state, not a pure attention decoder)"

#: model_types of the causal-LM mapping left out of the population, with the reason.
EXCLUDED: dict[str, str] = {
    **dict.fromkeys(
        [
            "bart",
            "bert",
            "bert-generation",
            "big_bird",
            "bigbird_pegasus",
            "blenderbot",
            "blenderbot-small",
            "camembert",
            "data2vec-text",
            "electra",
            "ernie",
            "marian",
            "mbart",
            "megatron-bert",
            "mvp",
            "pegasus",
            "plbart",
            "prophetnet",
            "rembert",
            "roberta",
            "roberta-prelayernorm",
            "roc_bert",
            "roformer",
            "trocr",
            "whisper",
            "xlm",
            "xlm-roberta",
            "xlm-roberta-xl",
            "xmod",
        ],
        _ENCODER,
    ),
    "xlnet": "permutation LM with two-stream attention and memory, not a causal decoder",
    "reformer": "LSH / chunked local attention with axial position embeddings: the training sequence must be a "
    "multiple of the chunk lengths and match the axial shape, not a standard decoder",
    **dict.fromkeys(
        [
            "blt",
            "dots3_note",
            "emu3",
            "fuyu",
            "gemma3",
            "gemma3n",
            "gemma4",
            "gemma4_unified",
            "git",
            "got_ocr2",
            "llama4",
            "mllama",
            "moshi",
            "moss_transcribe_diarize",
            "musicgen",
            "musicgen_melody",
            "phi4_multimodal",
            "qwen3_5",
            "qwen3_5_moe",
            "qwen4_exp",
        ],
        _COMPOSITE,
    ),
    **dict.fromkeys(
        ["gemma4_assistant", "gemma4_unified_assistant"],
        "speculative-decoding drafter: every layer reads the KV cache shared by the target model and its input "
        "is the target's hidden states, so it cannot run standalone",
    ),
    **dict.fromkeys(
        [
            "mamba",
            "mamba2",
            "falcon_mamba",
            "jamba",
            "bamba",
            "zamba",
            "zamba2",
            "falcon_h1",
            "lfm2",
            "lfm2_moe",
            "lfm3",
            "nemotron_h",
            "granitemoehybrid",
            "qwen3_next",
            "olmo_hybrid",
            "recurrent_gemma",
            "rwkv",
            "xlstm",
            # linear-attention layers in layer_types (gated delta net / lightning attention)
            "qwen3_5_text",
            "qwen3_5_moe_text",
            "qwen4_exp_text",
            "minimax",
            "lara_mini",
            # Kimi delta attention layers
            "kimi_linear",
            "bailing_hybrid",
        ],
        _RECURRENT,
    ),
}

POPULATION = sorted(model_type for model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if model_type not in EXCLUDED)

#: Parameters upstream never trains through the LM loss (they may be None after backward), by pattern.
NO_GRAD_BY_DESIGN: dict[str, str] = {
    # DeepSeek sparse attention: the lightning indexer only feeds a top-k selection (non-differentiable);
    # upstream trains it with a separate distillation loss, never through the LM loss.
    r"\.indexer\.": "DSA indexer only feeds a non-differentiable top-k",
    # Aux-loss-free load balancing: the bias shifts the top-k choice and is updated outside autograd.
    r"\.e_score_correction_bias$": "routing bias used only by the top-k choice",
}

#: model_types known to fail, with the reason (strict xfail, so a fix is noticed).
KNOWN_FAILING: dict[str, str] = {}

MAX_PARAMETERS = 2_000_000
BATCH = {"batch_size": 2, "seq_len": 11}


@pytest.fixture(autouse=True)
def _quiet_and_single_threaded():
    """transformers warns about every odd tiny value; keep the output readable. Tiny matmuls are far
    slower across threads than on one (on 2 shared cores a multi-threaded run takes ~10x longer)."""
    logger = logging.getLogger("transformers")
    level, threads = logger.level, torch.get_num_threads()
    logger.setLevel(logging.ERROR)
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.set_num_threads(threads)
        logger.setLevel(level)


def _params(model_types: list[str]) -> list:
    return [
        pytest.param(m, marks=pytest.mark.xfail(reason=KNOWN_FAILING[m], strict=True)) if m in KNOWN_FAILING else m
        for m in model_types
    ]


def _tiny(model_type: str) -> PreTrainedConfig:
    return tiny_config_for(CONFIG_MAPPING[model_type])


@pytest.mark.upstream_facts
def test_population_is_the_decoder_only_text_models() -> None:
    stale = sorted(set(EXCLUDED) - set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES))
    assert not stale, f"excluded model_types no longer in the causal-LM mapping: {stale}"
    assert set(KNOWN_FAILING) <= set(POPULATION)
    assert set(MODEL_OVERRIDES) <= set(CONFIG_MAPPING), "MODEL_OVERRIDES names an unknown model_type"
    assert len(POPULATION) >= 90


@pytest.mark.parametrize("model_type", _params(POPULATION))
def test_tiny_model_trains(model_type: str) -> None:
    """The upstream causal LM on the tiny config: finite loss, a gradient on every parameter, small."""
    config = _tiny(model_type)
    seed_everything(0)
    model = AutoModelForCausalLM.from_config(copy.deepcopy(config)).train()
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    n_parameters = sum(p.numel() for p in model.parameters())
    assert n_parameters < MAX_PARAMETERS, f"{n_parameters} parameters"

    output = model(**causal_lm_batch(config, **BATCH))
    assert torch.isfinite(output.loss), output.loss
    output.loss.backward()

    missing = [
        name
        for name, parameter in model.named_parameters()
        if parameter.requires_grad
        and parameter.grad is None
        and not any(re.search(pattern, name) for pattern in NO_GRAD_BY_DESIGN)
    ]
    assert not missing, f"no gradient: {missing}"


@pytest.mark.parametrize("model_type", POPULATION)
def test_weight_dims_are_pairwise_distinct(model_type: str) -> None:
    dims = weight_dims(_tiny(model_type))
    clashes = [(a, b) for (a, x), (b, y) in itertools.combinations(dims.items(), 2) if x == y]
    assert not clashes, f"{dims}: {clashes}"


@pytest.mark.parametrize("model_type", POPULATION)
def test_tiny_config_settings(model_type: str) -> None:
    """Eager attention, no dropout, tiny vocab and labels, non-default slot-visible values, valid layouts."""
    config_class = CONFIG_MAPPING[model_type]
    config = _tiny(model_type)
    default = vars(config_class())
    values = vars(config)

    assert config._attn_implementation == "eager"
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (0, 1, 2)
    assert config.num_labels == TINY["num_labels"]
    assert config.vocab_size == TINY["vocab"]
    for name, value in values.items():
        if (name.endswith(("dropout", "_pdrop", "dropout_prob")) or name.startswith("dropout")) and isinstance(
            value, (int, float)
        ):
            assert value == 0, name
        if name in ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps", "norm_epsilon") and value:
            assert value != default[name], f"{name} kept its default {value}"
        if name in ("router_aux_loss_coef", "aux_loss_coef"):
            assert value == AUX_LOSS_COEF, name
        if name == "output_router_logits":
            assert value is False

    # the real depth: hrm_text rewrites num_hidden_layers to the unrolled count (num_layers_per_stack is
    # the depth), longcat_flash counts two attention sub-layers per decoder layer (num_layers is the depth)
    layer_names = ("num_layers_per_stack", "num_layers", "num_hidden_layers", "n_layer", "n_layers")
    n_layers = next(values[n] for n in layer_names if values.get(n) is not None)
    assert 2 <= n_layers <= 4
    for name in ("layer_types", "mlp_layer_types"):
        if isinstance(values.get(name), list):
            assert len(values[name]) == n_layers, name
            assert set(values[name]) >= set(default[name]), f"{name} lost a kind of layer"
    heads, kv_heads = values.get("num_attention_heads"), values.get("num_key_value_heads")
    if isinstance(heads, int) and isinstance(kv_heads, int):
        assert heads % kv_heads == 0
    for name in ("max_position_embeddings", "n_positions", "max_seq_len"):
        if isinstance(values.get(name), int):
            assert values[name] >= 64, name
    for name in ("sliding_window", "sliding_window_size", "attention_window_size"):
        if isinstance(values.get(name), int) and values[name] > 0:  # 0 / None: no sliding window
            assert 1 < values[name] < BATCH["seq_len"], name


# --- the rules, on named models -------------------------------------------------------------------


def test_overrides_win_and_result_is_deterministic() -> None:
    config_class = CONFIG_MAPPING["qwen3_moe"]
    assert tiny_config_for(config_class).to_dict() == tiny_config_for(config_class).to_dict()
    config = tiny_config_for(config_class, hidden_size=64, num_experts=5, attn_implementation="sdpa")
    assert (config.hidden_size, config.num_experts) == (64, 5)
    assert config._attn_implementation == "sdpa"


def test_llama_keeps_the_tiny_sizes_of_configs_py() -> None:
    from modelgraft.models.testing.configs import TINY_SIZES

    config = tiny_config_for(CONFIG_MAPPING["llama"])
    for name, value in TINY_SIZES.items():
        assert getattr(config, name) == value, name
    assert config.rms_norm_eps != CONFIG_MAPPING["llama"]().rms_norm_eps


def test_head_dim_falls_back_to_hidden_over_heads_where_the_class_requires_it() -> None:
    from huggingface_hub.dataclasses import strict
    from transformers import LlamaConfig

    @strict
    class HeadDimTiedConfig(LlamaConfig):
        model_type = "head_dim_tied_test"

        def validate_architecture(self) -> None:
            super().validate_architecture()
            if self.head_dim * self.num_attention_heads != self.hidden_size:
                raise ValueError("heads * head_dim must equal hidden_size")

    config = tiny_config_for(HeadDimTiedConfig)
    assert (config.hidden_size, config.num_attention_heads, config.head_dim) == (48, 6, 8)
    assert tiny_config_for(LlamaConfig).head_dim == TINY["head_dim"]  # explicit where the class allows it


def test_mixed_layer_kinds_are_kept() -> None:
    gemma3 = tiny_config_for(CONFIG_MAPPING["gemma3_text"])
    assert gemma3.layer_types == ["sliding_attention", "sliding_attention", "full_attention"]
    assert gemma3.sliding_window < BATCH["seq_len"]
    qwen3_moe = tiny_config_for(CONFIG_MAPPING["qwen3_moe"])
    assert (qwen3_moe.num_experts, qwen3_moe.num_experts_per_tok, qwen3_moe.moe_intermediate_size) == (7, 4, 28)
    assert qwen3_moe.mlp_only_layers == [1]
    deepseek = tiny_config_for(CONFIG_MAPPING["deepseek_v3"])
    assert deepseek.first_k_dense_replace == 1  # layer 0 dense, layers 1-2 sparse
    assert deepseek.n_routed_experts % deepseek.n_group == 0 and deepseek.topk_group <= deepseek.n_group
    assert deepseek.num_experts_per_tok <= deepseek.topk_group * deepseek.n_routed_experts // deepseek.n_group


def test_mla_ranks_are_tiny_and_distinct() -> None:
    config = tiny_config_for(CONFIG_MAPPING["deepseek_v3"])
    ranks = [config.q_lora_rank, config.kv_lora_rank, config.qk_rope_head_dim, config.qk_nope_head_dim]
    ranks.append(config.v_head_dim)
    assert len(set(ranks)) == len(ranks) and max(ranks) < 64
    assert config.num_key_value_heads == config.num_attention_heads


def test_partial_rotary_factor_gives_an_even_rotary_dim() -> None:
    for model_type in ("mimo_v2_flash", "phi", "gpt_neox", "stablelm"):
        config = tiny_config_for(CONFIG_MAPPING[model_type])
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        ropes = [config.rope_parameters]
        if all(isinstance(v, dict) for v in config.rope_parameters.values()):
            ropes = list(config.rope_parameters.values())
        for rope in ropes:
            rotary = head_dim * rope.get("partial_rotary_factor", 1.0)
            assert math.isclose(rotary, round(rotary)) and round(rotary) % 2 == 0, (model_type, rope)


def test_a_latent_attention_rope_share_is_the_share_of_the_tiny_dims() -> None:
    """Mistral 4 rotates ``qk_rope_head_dim / (qk_nope_head_dim + qk_rope_head_dim)`` of its head dim (its
    default ``partial_rotary_factor``): the tiny factor is that share of the tiny dims, so the rotary embedding's
    width is the tiny ``qk_rope_head_dim`` (the default's share would not fit it, and upstream's own rotary
    application would fail)."""
    config = tiny_config_for(CONFIG_MAPPING["mistral4"])
    rotary = config.head_dim * config.rope_parameters["partial_rotary_factor"]
    assert math.isclose(rotary, config.qk_rope_head_dim)
    assert config.qk_rope_head_dim != config.qk_nope_head_dim  # still pairwise distinct


def test_sizes_a_validator_ties_take_the_tiny_size_their_default_equals() -> None:
    from huggingface_hub.dataclasses import strict
    from transformers import LlamaConfig

    @strict
    class AdapterConfig(LlamaConfig):
        model_type = "tied_sizes_test"
        num_key_value_heads: int = 8
        adapter_dim: int = 4096  # must equal hidden_size
        scorer_heads: int = 4  # at most the query heads per key/value head
        subsampling_factor: int = 8  # equals the kv heads by chance: no head count, not tied

        def validate_architecture(self) -> None:
            super().validate_architecture()
            if self.adapter_dim != self.hidden_size:
                raise ValueError("adapter_dim must equal hidden_size")
            if self.scorer_heads > self.num_attention_heads // self.num_key_value_heads:
                raise ValueError("scorer_heads must not exceed the heads per kv head")

    config = tiny_config_for(AdapterConfig)
    assert (config.adapter_dim, config.scorer_heads, config.subsampling_factor) == (TINY["hidden"], 3, 8)

    @strict
    class UntiedConfig(LlamaConfig):
        model_type = "untied_sizes_test"
        adapter_dim: int = 4096  # no validator: an equal default alone is no tie

    assert tiny_config_for(UntiedConfig).adapter_dim == 4096


def test_layer_counts_indices_and_periods_fit_the_tiny_depth() -> None:
    from huggingface_hub.dataclasses import strict
    from transformers import LlamaConfig

    @strict
    class StagedConfig(LlamaConfig):
        model_type = "staged_layers_test"
        n_input_layers: int = 8
        n_middle_layers: int | None = None  # derived: the layers between input and output
        n_output_layers: int = 8
        loop_layer_index_end: int = 24
        global_every_n_layers: int = 4
        num_mtp_layers: int = 1
        kv_source_layers: list[int] | None = None  # derived: pairs of layers share keys and values

        def __post_init__(self, **kwargs):
            if self.n_middle_layers is None:
                self.n_middle_layers = self.num_hidden_layers - self.n_input_layers - self.n_output_layers
            if self.kv_source_layers is None:
                self.kv_source_layers = [i - i % 2 for i in range(self.num_hidden_layers)]
            super().__post_init__(**kwargs)

        def validate_architecture(self) -> None:
            super().validate_architecture()
            if min(self.n_input_layers, self.n_middle_layers, self.n_output_layers) < 1:
                raise ValueError("every stage needs a layer")

    config = tiny_config_for(StagedConfig)
    assert (config.n_input_layers, config.n_middle_layers, config.n_output_layers) == (1, 1, 1)
    assert config.loop_layer_index_end == 2  # 24 of 32 layers: 3/4 of the tiny depth
    assert config.global_every_n_layers == TINY["layers"]  # a period: at most the depth, the last layer global
    assert config.num_mtp_layers == 1  # fits the tiny depth: kept
    assert config.kv_source_layers == [0, 0, 2]  # derived again for the tiny depth


def test_an_index_list_derived_as_every_layer_leaves_the_first_tiny_layer_of_the_kind_it_names_not() -> None:
    """lfm2's layout: every layer attention unless a checkpoint names the attention layers; the tiny model runs the
    other kind (a short convolution) in layer 0. An index list naming no kind (``rope_layer_idxs`` below) stays."""
    from huggingface_hub.dataclasses import strict
    from transformers import LlamaConfig

    @strict
    class ConvHybridConfig(LlamaConfig):
        model_type = "conv_hybrid_test"
        attention_layer_idxs: list[int] | None = None
        rope_layer_idxs: list[int] | None = None
        layer_types: list[str] | None = None

        def __post_init__(self, **kwargs):
            every = list(range(self.num_hidden_layers))
            if self.layer_types is None:
                attention = every if self.attention_layer_idxs is None else self.attention_layer_idxs
                self.attention_layer_idxs = attention
                self.layer_types = ["full_attention" if i in attention else "conv" for i in every]
            if self.rope_layer_idxs is None:
                self.rope_layer_idxs = every
            super().__post_init__(**kwargs)

    config = tiny_config_for(ConvHybridConfig)
    assert config.layer_types == ["conv", "full_attention", "full_attention"]
    assert config.attention_layer_idxs == [1, 2]
    assert config.rope_layer_idxs == [0, 1, 2]


def test_composites_and_hybrids_outside_the_population_get_tiny_sizes() -> None:
    dots3 = tiny_config_for(CONFIG_MAPPING["dots3_note"])
    assert dots3.text_config.hidden_size == TINY["hidden"]
    assert dots3.vision_config.adapter_out_dim == dots3.audio_config.adapter_out_dim == TINY["hidden"]
    assert dots3.vision_config.adapter_in_dim == dots3.vision_config.hidden_size == TINY["hidden"]
    assert dots3.text_config.pad_token_id == 0  # special ids of a text sub-config fit the tiny vocab
    moss = tiny_config_for(CONFIG_MAPPING["moss_transcribe_diarize"])  # text config declared as AutoConfig
    assert (moss.text_config.model_type, moss.text_config.hidden_size) == ("qwen3", TINY["hidden"])
    assert moss.audio_config.hidden_size == TINY["hidden"]
    kimi = tiny_config_for(CONFIG_MAPPING["kimi_linear"])
    assert kimi.linear_num_heads * kimi.linear_head_dim < kimi.hidden_size


def test_a_shared_expert_width_named_share_expert_dim_is_tiny() -> None:
    step = tiny_config_for(CONFIG_MAPPING["step3p7"])
    assert step.text_config.share_expert_dim == TINY["shared_intermediate"]
