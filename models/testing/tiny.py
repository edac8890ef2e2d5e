"""Tiny test configs derived from each model's own config class.

A scaffold of any upstream model gets sizes its own config accepts.

:func:`tiny_config_for` starts from the config class's defaults and scales every size-like attribute
down to tiny, pairwise-distinct values (so a transposed or mis-sliced weight cannot pass) while keeping
the model's own constraints: heads divisible by kv heads, ``hidden_size`` vs ``head_dim`` as the class
validates it, per-layer lists rebuilt for the tiny depth with every kind of layer the default mixes,
counts, indices and periods of layers that fit the tiny depth, sliding windows shorter than the test
sequence, MoE routing that group-limited routers accept, MLA ranks tiny and distinct, rotary dims even.
What the class derives from other fields (a remainder of layers, a per-layer map of layer indices) is
left for it to derive again from the tiny values; sizes a validator ties to another size (an adapter's
width to a hidden size) follow the size their default equals (:func:`tiny_config_for`). Composites get
the rules in each sub-config. Slot-visible values (norm eps, aux-loss coefficient) get non-default
values so a dropped or hard-coded argument shows (docs/design.md, "The parity contract").
``overrides`` win over all.

The rules are generic, keyed by attribute name (after resolving the class's ``attribute_map``);
:data:`MODEL_OVERRIDES` holds the few per-model_type exceptions, each with its reason.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

from huggingface_hub.errors import StrictDataclassError
from transformers import PreTrainedConfig

__all__ = [
    "AUX_LOSS_COEF",
    "EPS_VALUES",
    "MODEL_OVERRIDES",
    "TINY",
    "tiny_config_for",
    "tiny_overrides_for",
    "weight_dims",
]

_C = TypeVar("_C", bound=PreTrainedConfig)

#: The tiny value of each size role. No two of the values that become weight dims coincide, nor the
#: products they make (q_proj 6*16=96, k/v_proj 2*16=32, fused gate_up 2*80=160, 2*28=56, MLA below).
TINY: MappingProxyType[str, Any] = MappingProxyType(
    {
        "hidden": 48,
        "intermediate": 80,
        "heads": 6,
        "kv_heads": 2,
        "head_dim": 16,
        "vocab": 131,
        "layers": 3,
        "max_positions": 64,
        "sliding_window": 5,
        # MoE
        "experts": 7,
        "top_k": 4,
        "grouped_experts": 8,  # group-limited routing: 4 groups of 2, 2 groups kept, 3 experts per token
        "n_group": 4,
        "topk_group": 2,
        "grouped_top_k": 3,
        "moe_intermediate": 28,
        "dense_intermediate": 68,
        "shared_intermediate": 44,
        "shared_experts": 1,
        # MLA: q_b 40 -> 6*(12+8)=120, kv_a 48 -> 24+8=32, kv_b 24 -> 6*(12+10)=132, o 6*10=60 -> 48
        "q_lora_rank": 40,
        "kv_lora_rank": 24,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 12,
        "v_head_dim": 10,
        # sparse-attention indexers (DeepSeek V3.2 family)
        "index_heads": 4,
        "index_head_dim": 14,
        "index_topk": 6,
        "zero_experts": 2,  # LongCat's identity ("zero computation") experts, routed next to the 7
        "router_hidden": 52,  # ZAYA's router MLP
        "o_lora_rank": 36,  # DeepSeek V4 grouped low-rank output projection: 2 groups of 3 heads
        "o_groups": 2,
        "per_layer_input": 18,  # gemma3n / gemma4 per-layer input embeddings
        "low_rank": 22,  # gemma3n LAuReL rank
        "num_labels": 5,
        # Gated DeltaNet mixers: key_dim 2*10=20, value_dim 4*18=72, conv channels 2*20+72=112
        "linear_key_heads": 2,
        "linear_value_heads": 4,
        "linear_key_head_dim": 10,
        "linear_value_head_dim": 18,
    }
)

#: Non-default norm epsilons, one per eps attribute of a config (in field order), so a dropped or swapped
#: eps changes the result. None of them is the default of any config in transformers.
EPS_VALUES: tuple[float, ...] = (3e-5, 7e-5, 9e-5, 4e-4)

#: Coefficient given to every aux / load-balancing loss weight.
AUX_LOSS_COEF = 0.25

# --- attribute names by role ---------------------------------------------------------------------
_ROLE_NAMES: dict[str, tuple[str, ...]] = {
    "hidden": ("hidden_size", "d_model", "n_embd", "emb_dim"),
    "intermediate": (
        "intermediate_size",
        "ffn_dim",
        "n_inner",
        "ffn_hidden_size",
        "feed_forward_size",
        "dff",
        "dim_ff",
        "decoder_ffn_dim",
    ),
    # the dense MLP of models whose experts take intermediate_size (llama4, minimax_m3, cohere2_moe); other
    # spellings (ergo's first_dense_, kolibri1_1's mlp_only_) by their form, _role_by_pattern
    "dense_intermediate": ("dense_intermediate_size", "intermediate_size_mlp", "prefix_dense_intermediate_size"),
    "heads": ("num_attention_heads", "n_head", "n_heads", "num_heads", "attention_heads", "swa_num_attention_heads"),
    "kv_heads": (
        "num_key_value_heads",
        "num_kv_heads",
        "kv_n_heads",
        "num_query_groups",
        "multi_query_group_num",
        "swa_num_key_value_heads",
    ),
    "head_dim": (
        "head_dim",
        "attention_head_dim",
        "kv_channels",
        "d_head",
        "dim_head",
        "attention_head_size",
        "swa_head_dim",
    ),
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    # unpadded_vocab_size: the LM head's rows of a checkpoint whose embedding is padded (inkling2)
    "vocab": ("vocab_size", "vocab_size_per_layer_input", "unpadded_vocab_size"),
    "max_positions": ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "context_length"),
    "sliding_window": (
        "sliding_window",
        "sliding_window_size",
        "window_size",
        "attention_window_size",
        "attention_chunk_size",
    ),
    "experts": ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"),
    "top_k": ("num_experts_per_tok", "moe_topk", "moe_k", "top_k_experts", "moe_top_k"),
    "moe_intermediate": ("moe_intermediate_size", "expert_ffn_hidden_size", "moe_ffn_hidden_size"),
    "shared_intermediate": (
        "shared_expert_intermediate_size",
        "shared_intermediate_size",
        "moe_shared_expert_intermediate_size",
        "share_expert_dim",  # Step-3.5's text decoder (step3p7)
    ),
    "shared_experts": ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
    "qk_nope_head_dim": ("qk_nope_head_dim",),
    "v_head_dim": ("v_head_dim",),
    "index_heads": ("index_n_heads", "indexer_n_heads"),
    "index_head_dim": ("index_head_dim", "indexer_head_dim"),
    "index_topk": ("index_topk",),
    "per_layer_input": ("hidden_size_per_layer_input",),
    "zero_experts": ("zero_expert_num",),
    "router_hidden": ("router_hidden_size",),
    "o_lora_rank": ("o_lora_rank",),
    "o_groups": ("o_groups",),
    "low_rank": ("laurel_rank",),
    "linear_key_heads": ("linear_num_key_heads",),
    # one head count and head dim for q, k and v (Kimi delta attention: kimi_linear, bailing_hybrid)
    "linear_value_heads": ("linear_num_value_heads", "linear_num_heads"),
    "linear_key_head_dim": ("linear_key_head_dim", "linear_head_dim"),
    "linear_value_head_dim": ("linear_value_head_dim",),
}
_NAME_ROLE: dict[str, str] = {name: role for role, names in _ROLE_NAMES.items() for name in names}

#: Roles set even when the default is ``None`` (there ``None`` means "derive it"); for every other role a
#: default ``None`` means "off" (no sliding window, no q compression, no experts) and stays ``None``.
_SET_WHEN_NONE = {
    "head_dim",
    "intermediate",
    "dense_intermediate",
    "kv_heads",
    "max_positions",
    "top_k",
    "linear_key_heads",
    "linear_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
}

#: Config attributes holding an epsilon a slot receives; tiny configs give each a non-default value.
EPS_NAMES = (
    "rms_norm_eps",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "norm_eps",
    "norm_epsilon",
    "eps",
    "rms_norm_eps_moe_gate",
    "mixer_rms_eps",
)
#: Config attributes holding an aux-loss coefficient; tiny configs make it large enough to matter.
AUX_NAMES = ("router_aux_loss_coef", "aux_loss_coef", "moe_loss_weight")
_NOISE_NAMES = ("router_jitter_noise", "input_jitter_noise", "moe_jitter_eps")
_TOKEN_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
_LAYER_INDEX_SUFFIXES = ("_layers", "_layer_ids", "_idxs", "_indices")

#: Per-model_type overrides applied after the generic rules (and before the caller's ``overrides``).
#: Each entry says why the generic rules cannot produce a working tiny config for that model.
MODEL_OVERRIDES: MappingProxyType[str, Mapping[str, Any]] = MappingProxyType(
    {
        # CodeGen splits the fused qkv into mp_num=4 partitions: heads must divide by 4 (head_dim 12).
        "codegen": {"n_head": 4, "rotary_dim": 6},
        # moe_layers (layer indices) covers every layer by default; keep layer 1 dense (intermediate_size_mlp).
        "llama4_text": {"moe_layers": [0, 2]},
        # The default leaves rope_parameters empty although every layer is full attention (KeyError).
        "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4}}},
        # DbrxAttention reads attn_config.rope_theta, which DbrxAttentionConfig does not declare, and clamps
        # qkv to clip_qkv without checking for None.
        "dbrx": {"attn_config": {"attn_pdrop": 0.0, "clip_qkv": 8.0, "kv_n_heads": 2, "rope_theta": 1e4}},
        # MoE in every layer past first_k_dense_replace, but the default sets no experts at all (None).
        "dots1": {"n_routed_experts": 8, "num_experts_per_tok": 3, "n_shared_experts": 1},
        # Compress rates 4/128 exceed the 11-token test sequence: the compressors would get no block.
        "deepseek_v4": {"compress_rates": {"compressed_sparse_attention": 2, "heavily_compressed_attention": 4}},
        # Shared-KV layers reuse the last earlier layer of the same type: needs a sliding layer before the
        # shared one, so [sliding, full, sliding] with the last layer sharing.
        "gemma3n_text": {
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            "num_kv_shared_layers": 1,
        },
        # The config derives no layer_types (None by default, which the decoder indexes: a checkpoint's config
        # names them); a short-convolution layer first, then attention, as lfm2's defaults get (tiny.py's rules).
        "lfm2_moe": {"layer_types": ["conv", "full_attention", "full_attention"]},
        # Full-attention layers take their head dim from the global_head_dim kwarg (default 512). Gemma 4's MoE
        # block is off by default (the 26B-A4B checkpoint turns it on) with its sizes None, which no rule sizes: a
        # text model scaffolded as moe must build its experts.
        "gemma4_text": {
            "global_head_dim": 24,
            "enable_moe_block": True,
            "num_experts": TINY["experts"],
            "top_k_experts": TINY["top_k"],
            "moe_intermediate_size": TINY["moe_intermediate"],
        },
        "gemma4_unified_text": {"global_head_dim": 24},
        # attention_types is [[kinds, repeat], ...], expanded to one kind per layer (validated against
        # num_layers): global, local, global.
        "gpt_neo": {"attention_types": [[["global", "local"], 1], [["global"], 1]]},
        # The sliding window is derived as local_attention // 2 (default 128 -> 64, the whole test batch).
        "modernbert-decoder": {"local_attention": 10},
        # num_hidden_layers counts the two attention sub-layers of each of the num_layers decoder layers
        # (the model rewrites it to 2 * num_layers); keep the config self-consistent.
        "longcat_flash": {"num_hidden_layers": 6},
        # o_proj is Linear(hidden, hidden): heads * head_dim must equal hidden_size.
        "helium": {"head_dim": 8},
        # Sliding layers double the kv heads: heads must divide by 2 * kv heads.
        "mimo_v2_flash": {"num_key_value_heads": 1},
        # The config validates num_experts_per_tok == 1.
        "zaya": {"num_experts_per_tok": 1},
        # Sliding layers take their attention sizes from a per_layer_config the config builds from swa_*
        # keyword arguments (not fields, so no rule sees them) defaulting to the checkpoint's (64 heads, ranks
        # 1024: 38M parameters). It validates the sliding head_dim as qk_nope + qk_rope (rope = head_dim - nope,
        # here 8 of 32: an exact partial rotary factor); kv heads equal heads, as in every layer.
        "dots3_note_text": {
            "swa_num_attention_heads": 4,
            "swa_num_key_value_heads": 4,
            "swa_q_lora_rank": 40,
            "swa_kv_lora_rank": 30,
            "swa_head_dim": 32,
            "swa_qk_nope_head_dim": 24,
            "swa_v_head_dim": 10,
        },
    }
)


def _is_dropout(name: str) -> bool:
    return (
        name.endswith(("dropout", "_pdrop", "dropout_prob", "dropout_p", "layerdrop"))
        or name.startswith("dropout")
        or "dropout" in name.split("_")
    )


def _defaults(config_class: type[PreTrainedConfig]) -> tuple[PreTrainedConfig, dict[str, Any]]:
    """The default instance and its constructor arguments with their (post-init) values."""
    default = config_class()
    if dataclasses.is_dataclass(config_class):
        names = [f.name for f in dataclasses.fields(config_class) if f.init]
    else:
        params = inspect.signature(config_class.__init__).parameters.values()
        names = [p.name for p in params if p.name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    base = set(_base_fields())
    stored = vars(default)  # raw storage: per-layer (heterogeneous) configs refuse some global reads
    attribute_map = getattr(config_class, "attribute_map", None) or {}
    values = {}
    for name in names:
        if name in base and name not in _TOKEN_IDS and name != "tie_word_embeddings":
            continue
        key = name if name in stored else attribute_map.get(name, name)  # a field stored under its alias
        if key in stored:
            values[name] = stored[key]
    return default, values


def _base_fields() -> list[str]:
    if dataclasses.is_dataclass(PreTrainedConfig):
        return [f.name for f in dataclasses.fields(PreTrainedConfig)]
    return list(inspect.signature(PreTrainedConfig.__init__).parameters)


def _role(config_class: type[PreTrainedConfig], name: str) -> str | None:
    if name in _NAME_ROLE:
        return _NAME_ROLE[name]
    for alias, target in (getattr(config_class, "attribute_map", None) or {}).items():
        if target == name and alias in _NAME_ROLE:
            return _NAME_ROLE[alias]
    return _role_by_pattern(name)


def _role_by_pattern(name: str) -> str | None:
    """The role of a size name no list of :data:`_ROLE_NAMES` holds, from its form.

    Each release brings new spellings of an MLP width (``first_dense_intermediate_size``,
    ``shared_experts_intermediate_size``); left at its default it makes a model of millions of
    parameters, so any ``*intermediate_size`` takes the intermediate role its words name.
    """
    if not name.endswith("intermediate_size") or name in _NAME_ROLE:
        return None
    if "shared" in name:
        return "shared_intermediate"
    if "moe" in name or "expert" in name:
        return "moe_intermediate"
    return "dense_intermediate"


def _declared_defaults(config_class: type[PreTrainedConfig]) -> dict[str, Any]:
    """The defaults the class declares, before its ``__post_init__`` derives anything.

    A field declared ``None`` that holds a value on the default instance was derived by the class from
    other fields (dory's ``n_recurrent_layers``, kolibri1_1's ``kv_source_layers``); where no rule can
    scale it, leaving it ``None`` lets the class derive it again from the tiny values.
    """
    if dataclasses.is_dataclass(config_class):
        declared = {}
        for field in dataclasses.fields(config_class):
            if field.default is not dataclasses.MISSING:
                declared[field.name] = field.default
            elif field.default_factory is not dataclasses.MISSING:
                declared[field.name] = field.default_factory()
        return declared
    params = inspect.signature(config_class.__init__).parameters.values()
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


def _counts_layers(name: str) -> bool:
    """A quantity measured in layers: a count, an index or a period (``n_input_layers``,
    ``loop_layer_index_end``, ``n_layers_per_attn_res_block``, ``global_attn_every_n_layers``). Sized for
    the default depth, it would point past the tiny one (a loop over layers that do not exist, a negative
    remainder of layers)."""
    words = name.split("_")
    return "layer" in words or "layers" in words


def _is_layer_period(name: str) -> bool:
    """A period of layer kinds (``global_attn_every_n_layers``, ``no_rope_layer_interval``,
    ``layer_group_size``): every n-th layer is of the other kind."""
    return bool({"every", "interval", "period", "step", "group"} & set(name.split("_")))


def _kinds(values: Sequence[Any]) -> list[Any]:
    """The distinct entries of ``values``, in order of first appearance (entries may be unhashable)."""
    kinds: list[Any] = []
    for value in values:
        if value not in kinds:
            kinds.append(value)
    return kinds


def _rebuild_per_layer(values: Sequence[Any], n_layers: int) -> list[Any]:
    """``values`` (one per default layer) cut to ``n_layers``, keeping every kind the default mixes.

    The first ``n_layers`` entries are kept; a kind that only appears later replaces the tail, so e.g.
    gemma3's ``5 sliding : 1 full`` becomes ``[sliding, sliding, full]``.
    """
    kinds = _kinds(values)
    out = list(values[:n_layers])
    missing = [kind for kind in kinds if kind not in out]
    if len(kinds) > n_layers:
        raise ValueError(f"{len(kinds)} layer kinds do not fit in {n_layers} layers")
    slot = n_layers - 1
    for kind in reversed(missing):
        # replace from the end, never removing the last occurrence of a kind already present
        while out.count(out[slot]) == 1 and out[slot] in kinds:
            slot -= 1
        out[slot] = kind
        slot -= 1
    return out


def _is_layer_index_list(name: str, value: Sequence[Any], n_layers: int) -> bool:
    """A list of layer indices (``mlp_only_layers``, ``moe_layers``), not one entry per layer."""
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    increasing = all(a < b for a, b in itertools.pairwise(value))
    return ints and increasing and name.endswith(_LAYER_INDEX_SUFFIXES) and all(0 <= v < n_layers for v in value)


def _is_layer_index_map(name: str, value: Sequence[Any]) -> bool:
    """One earlier (or the same) layer's index per layer (kolibri1_1's ``kv_source_layers``: whose keys and
    values each layer reads), not a kind per layer: mostly each layer's own index."""
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if not ints or not name.endswith(_LAYER_INDEX_SUFFIXES):
        return False
    own = sum(v == i for i, v in enumerate(value))
    return all(0 <= v <= i for i, v in enumerate(value)) and 2 * own >= len(value)


def _second_layer_kind(
    config_class: type[PreTrainedConfig],
    out: Mapping[str, Any],
    values: Mapping[str, Any],
    declared: Mapping[str, Any],
    default_layers: int | None,
    n_layers: int,
) -> dict[str, list[Any]]:
    """A layer-index list the class derives as every layer, from which it also derives ``layer_types`` with a
    single kind, set to every tiny layer but the first where that gives ``layer_types`` a second kind.

    lfm2's ``full_attn_idxs``: declared None, every layer attention by default, its conv layers only where a
    checkpoint's config names the attention layers; a tiny config of the defaults would never run the conv. As the
    ``mlp_layer_types`` rule does for dense and sparse MLPs, the tiny model gets both kinds of layer. Tried by
    building the config (``kv_source_layers`` of mistral_large4, also every layer by default, names no kind).
    """
    if default_layers is None or "layer_types" not in declared or declared["layer_types"] is not None:
        return {}
    every = list(range(default_layers))
    derived = {key: value for key, value in out.items() if key != "layer_types"}  # derived again from the list
    for name, value in values.items():
        if declared.get(name, ...) is not None or not isinstance(value, list) or value != every:
            continue
        if not name.endswith(_LAYER_INDEX_SUFFIXES):
            continue
        changed = {**derived, name: list(range(1, n_layers))}
        try:
            before = set(config_class(**derived).layer_types or ())
            after = config_class(**changed).layer_types or []
        except (TypeError, ValueError, StrictDataclassError):  # a config refusing the trial keeps the rules' values
            continue
        if len(set(after)) > len(before) == 1:
            return {name: changed[name], "layer_types": list(after)}
    return {}


def _even_rotary_factor(factor: float, head_dim: int) -> float:
    """``factor`` if it gives an even, non-zero rotary dim on ``head_dim``, else 0.5."""
    rotary = int(head_dim * factor)
    if rotary > 0 and rotary % 2 == 0 and math.isclose(rotary, head_dim * factor, abs_tol=1e-6):
        return factor
    return 0.5


def _latent_rope_factor(values: Mapping[str, Any], out: Mapping[str, Any]) -> tuple[float, float] | None:
    """(the default factor, the tiny one) where the default ``partial_rotary_factor`` is the latent-attention
    share ``qk_rope_head_dim / (qk_nope_head_dim + qk_rope_head_dim)`` (Mistral 4 derives it so, and rotates
    that share of its head dim): the tiny factor is the same share of the tiny dims; None for any other model."""
    names = ("qk_rope_head_dim", "qk_nope_head_dim")
    if not all(isinstance(values.get(name), int) and isinstance(out.get(name), int) for name in names):
        return None
    rope, nope = values["qk_rope_head_dim"], values["qk_nope_head_dim"]
    return rope / (nope + rope), out["qk_rope_head_dim"] / (out["qk_nope_head_dim"] + out["qk_rope_head_dim"])


def _fix_rope(rope: Any, head_dim: int, latent: tuple[float, float] | None = None) -> Any:
    """``rope_parameters`` with every ``partial_rotary_factor`` giving an even rotary dim (``latent``: a default
    factor that is the latent-attention rope share, and the tiny share that replaces it)."""
    if isinstance(rope, Mapping):
        out = {}
        for key, value in rope.items():
            if (
                key == "partial_rotary_factor"
                and latent is not None
                and isinstance(value, float)
                and math.isclose(value, latent[0])
            ):
                out[key] = latent[1]
            elif key == "partial_rotary_factor" and isinstance(value, (int, float)):
                out[key] = _even_rotary_factor(float(value), head_dim)
            elif isinstance(value, Mapping):
                out[key] = _fix_rope(value, head_dim, latent)
            else:
                out[key] = value
        return out
    return rope


def tiny_overrides_for(
    config_class: type[PreTrainedConfig], *, head_dim_explicit: bool = True, tie_sizes: bool = False
) -> dict[str, Any]:
    """The constructor arguments :func:`tiny_config_for` passes (before the caller's overrides).

    ``head_dim_explicit``: give an explicit ``head_dim`` (16, so ``heads * head_dim != hidden``); when
    False the head dim is ``hidden / heads`` (8), for models whose code or validation requires it.
    ``tie_sizes``: also give the sizes no rule names the tiny value of the size their default equals
    (:func:`_tied_sizes`), here and in the sub-configs, for classes whose validation ties one size to
    another. Off by default: an equal default is often a coincidence.
    """
    out, values, sub_sizes = _rule_overrides(config_class, head_dim_explicit=head_dim_explicit, tie_sizes=tie_sizes)
    if tie_sizes:
        out = {**_tied_sizes(config_class, values, out, sub_sizes), **out}
    out.update(_TOKEN_IDS)
    out.update(MODEL_OVERRIDES.get(getattr(config_class, "model_type", ""), {}))
    return out


def _rule_overrides(
    config_class: type[PreTrainedConfig], *, head_dim_explicit: bool, tie_sizes: bool
) -> tuple[dict[str, Any], dict[str, Any], list[tuple[str, int, int]]]:
    """The generic rules' values for ``config_class`` and its sub-configs (not its own tied sizes, special
    ids or :data:`MODEL_OVERRIDES`), its default values, and its sub-configs' sizes (:func:`_size_table`),
    the text config's first."""
    _, values = _defaults(config_class)
    declared = _declared_defaults(config_class)
    roles = {name: _role(config_class, name) for name in values}
    present = {role for role in roles.values() if role}
    out: dict[str, Any] = {}

    default_layers = next((values[n] for n, r in roles.items() if r == "layers" and isinstance(values[n], int)), None)
    n_layers = TINY["layers"]
    grouped = values.get("n_group") is not None  # group-limited routing: experts must split into groups
    has_mla = "kv_lora_rank" in present
    if has_mla:
        head_dim = TINY["qk_rope_head_dim"]
    elif head_dim_explicit and "head_dim" in present:
        head_dim = TINY["head_dim"]
    else:  # the model derives it: hidden / heads
        head_dim = TINY["hidden"] // TINY["heads"]

    eps_index = 0
    for name, value in values.items():
        role = roles[name]
        if role is not None:
            if (value is None and role not in _SET_WHEN_NONE) or isinstance(value, bool):
                continue
            if role == "layers":
                tiny = n_layers
            elif role == "head_dim":
                # MLA models use head_dim for the rotary part (DeepSeek: head_dim = qk_rope_head_dim)
                tiny = head_dim
            elif role == "kv_heads" and has_mla:
                tiny = TINY["heads"]  # MLA decompresses one key/value per query head
            elif role == "experts":
                tiny = TINY["grouped_experts"] if grouped else TINY["experts"]
            elif role == "top_k":
                if value is None and not any(values.get(n) for n, r in roles.items() if r == "experts"):
                    continue  # no experts, no routing
                tiny = TINY["grouped_top_k"] if grouped else TINY["top_k"]
            elif role == "shared_experts":
                tiny = TINY["shared_experts"] if value else value
            elif role == "max_positions":
                tiny = TINY["max_positions"] if value is None or value > TINY["max_positions"] else value
            else:
                tiny = TINY[role]
            # a per-layer list of sizes (gemma3n's intermediate_size) stays a list
            out[name] = [tiny] * n_layers if isinstance(value, (list, tuple)) else tiny
            continue
        if name in _TOKEN_IDS:
            continue  # always set (below), even where the class declares no such field
        elif name.endswith("_token_id") and isinstance(value, int) and not isinstance(value, bool):
            # other special ids (sep, eod, ...) must fit the tiny vocab; keep them clear of 0/1/2
            out[name] = 3 + sorted(n for n in values if n.endswith("_token_id") and n not in _TOKEN_IDS).index(name)
        elif name in EPS_NAMES and isinstance(value, float):
            candidates = [eps for eps in EPS_VALUES[eps_index:] + EPS_VALUES[:eps_index] if eps != value]
            out[name] = candidates[0]
            eps_index += 1
        elif _is_dropout(name) and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = type(value)(0)  # keep the declared type (mpt's attn_pdrop is an int)
        elif name in _NOISE_NAMES and isinstance(value, (int, float)):
            out[name] = 0.0
        elif name in AUX_NAMES and isinstance(value, (int, float)):
            out[name] = AUX_LOSS_COEF
        elif name == "output_router_logits":
            out[name] = False
        elif name == "pretraining_tp":
            out[name] = 1
        elif name == "n_group" and value is not None:
            out[name] = TINY["n_group"]
        elif name == "topk_group" and value is not None:
            out[name] = TINY["topk_group"]
        elif name in ("first_k_dense_replace", "num_dense_layers", "moe_layer_start_index"):
            out[name] = 1  # layer 0 dense, the others sparse
        elif name == "moe_layer_end_index":
            out[name] = n_layers - 1
        elif name in ("moe_layer_freq", "moe_layer_interval"):
            out[name] = 1
        elif name == "decoder_sparse_step":
            out[name] = 1 if "mlp_only_layers" in values else 2
        elif name == "mlp_only_layers":
            out[name] = [1]
        elif name == "qk_head_dim" and isinstance(value, int):
            out[name] = TINY["qk_nope_head_dim"] + TINY["qk_rope_head_dim"]
        elif name == "rotary_dim" and isinstance(value, int):
            out[name] = head_dim // 2
        elif name == "max_window_layers" and isinstance(value, int):
            out[name] = min(value, n_layers)
        elif (
            _counts_layers(name)
            and isinstance(value, int)
            and not isinstance(value, bool)
            and value > n_layers  # past the tiny depth; what fits may count another stack (conv layers)
            and default_layers
            and declared.get(name) is not None  # a derived count (declared None) is derived again
        ):
            if _is_layer_period(name):
                # at most the tiny depth, so the last tiny layer is of the other kind, as in the per-layer
                # lists rebuilt below (ergo's every 4th layer full: [sliding, sliding, full])
                out[name] = min(value, n_layers)
            else:
                # scaled with the depth, at least 1 and at most the tiny depth: dory's 8 input / 8 output
                # layers of 36 become 1 and 1 (its recurrent rest is derived: 1), inkling2_loop's loop over
                # layers 6-18 of 24 in blocks of 6 becomes layers 1-2 in blocks of 1
                out[name] = min(n_layers, max(1, round(value * n_layers / default_layers)))

    # per-layer lists: layer-index lists keep the indices that exist; one-entry-per-layer lists are
    # rebuilt for the tiny depth keeping every kind
    for name, value in values.items():
        if name in out or default_layers is None or not isinstance(value, (list, tuple)) or not value:
            continue
        if _is_layer_index_list(name, value, default_layers):
            out[name] = [v for v in value if v < n_layers] or [n_layers - 1]
        elif len(value) == default_layers and default_layers > 1:
            if len(_kinds(value)) > n_layers and declared.get(name) is None:
                continue  # more kinds than tiny layers, derived by the class: derived again for the tiny layout
            if len(_kinds(value)) > n_layers and _is_layer_index_map(name, value):
                out[name] = list(range(n_layers))  # each layer its own (no layer reads another's)
                continue
            out[name] = _rebuild_per_layer(value, n_layers)
    if out.get("mlp_layer_types") and set(out["mlp_layer_types"]) == {"sparse"}:
        # every layer sparse by default, but the "dense" kind is the same config's other branch: layer 0
        # dense so both kinds of MLP are exercised (mellum, inkling, minimax_m3, cohere2_moe)
        out["mlp_layer_types"] = ["dense", *out["mlp_layer_types"][1:]]

    out.update(_second_layer_kind(config_class, out, values, declared, default_layers, n_layers))

    # rope: partial rotary factors giving an even rotary dim on the head dim the rope applies to
    rope_head_dim = out.get("head_dim", head_dim)
    if values.get("rope_parameters"):
        out["rope_parameters"] = _fix_rope(values["rope_parameters"], rope_head_dim, _latent_rope_factor(values, out))
    if isinstance(values.get("partial_rotary_factor"), float):
        out["partial_rotary_factor"] = _even_rotary_factor(values["partial_rotary_factor"], rope_head_dim)

    # sliding windows: a default-None window stays off unless layer_types asks for sliding layers
    layer_kinds = [str(v) for v in out.get("layer_types", values.get("layer_types") or [])]
    if any("sliding" in kind for kind in layer_kinds):
        for name, role in roles.items():
            if role == "sliding_window" and values[name] is None and name not in out:
                out[name] = TINY["sliding_window"]

    # composite (dbrx, mpt, VLMs): sub-configs get the same rules. A sub-config declared as AutoConfig
    # (moss_transcribe_diarize's qwen3 text config) is of the class its default instance has.
    subs = {}
    for name, declared in (getattr(config_class, "sub_configs", None) or {}).items():
        current = values.get(name)
        sub_class = type(current) if isinstance(current, PreTrainedConfig) else declared
        if name in values and isinstance(sub_class, type) and issubclass(sub_class, PreTrainedConfig):
            subs[name] = (sub_class, current, declared)
    text_first = sorted(subs, key=lambda key: key != "text_config")
    scaled = {
        name: _sub_overrides(sub, current, declared_class=declared, tie_sizes=tie_sizes)
        for name, (sub, current, declared) in subs.items()
    }
    for name, (sub_class, current, declared) in subs.items():
        sub = scaled[name][0]
        if tie_sizes:  # a size of one sub-config may be tied to another's (a vision adapter's to the text hidden)
            siblings = [entry for key in text_first if key != name for entry in scaled[key][1]]
            sub, _ = _sub_overrides(
                sub_class, current, declared_class=declared, tie_sizes=True, related_sizes=siblings
            )
        if sub:
            out[name] = sub
    return out, values, [entry for name in text_first for entry in scaled[name][1]]


def _sub_overrides(
    sub_class: type[PreTrainedConfig],
    current: Any,
    *,
    declared_class: Any,
    tie_sizes: bool = False,
    related_sizes: Sequence[tuple[str, int, int]] = (),
) -> tuple[dict[str, Any], list[tuple[str, int, int]]]:
    """A sub-config (dbrx's ``attn_config`` / ``ffn_config``, mpt's ``attn_config``, a VLM's text and vision
    configs) under the same rules.

    Returned as the dict of the sub-config's own fields, which the parent accepts in place of the object,
    and the sub-config's sizes as :func:`_size_table` lists them, for the sizes of its siblings tied to
    them. The parent's instance may differ from the sub-config class's defaults (a ``SubConfigSpec``'s
    ``init_kwargs``), so tied sizes read the parent's values, ``related_sizes`` being its siblings'.
    The special ids the sub-config sets take the tiny ones (a text config's must fit the tiny vocab);
    the keyword arguments :data:`MODEL_OVERRIDES` gives its model_type are passed along.
    """
    if isinstance(current, PreTrainedConfig):
        current = vars(current)
    if not isinstance(current, Mapping):
        return {}, []
    _, own = _defaults(sub_class)
    sub = {k: current[k] for k in own if k in current and k not in _TOKEN_IDS}
    tiny, _, _ = _rule_overrides(sub_class, head_dim_explicit=True, tie_sizes=tie_sizes)
    tiny = {k: v for k, v in tiny.items() if k in own}
    if tie_sizes:
        tiny = {**_tied_sizes(sub_class, sub, tiny, related_sizes), **tiny}
    tiny.update(MODEL_OVERRIDES.get(getattr(sub_class, "model_type", ""), {}))
    if not tiny:
        return {}, []  # nothing to scale (a timm backbone): the parent keeps its default object
    tiny.update({k: v for k, v in _TOKEN_IDS.items() if current.get(k) is not None})
    if declared_class is not sub_class and getattr(sub_class, "model_type", ""):
        tiny["model_type"] = sub_class.model_type  # declared AutoConfig: the dict names its class
    return {**sub, **tiny}, _size_table(sub_class, sub, tiny)


#: The size roles a size no rule names may be tied to, most likely first: adapters and projections meet
#: a hidden size; ``group`` is the query heads per key/value head.
_TIE_ROLES = (
    "hidden",
    "head_dim",
    "heads",
    "group",
    "intermediate",
    "dense_intermediate",
    "moe_intermediate",
    "shared_intermediate",
    "vocab",
)


def _size_table(
    config_class: type[PreTrainedConfig], values: Mapping[str, Any], tiny: Mapping[str, Any]
) -> list[tuple[str, int, int]]:
    """``(role, default, tiny)`` of each size of ``values`` the rules scaled, in :data:`_TIE_ROLES` order."""

    def is_size(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value > 0

    sizes: dict[str, list[tuple[str, int, int]]] = {}
    for name, value in values.items():
        role = _role(config_class, name)
        if role in (*_TIE_ROLES, "kv_heads") and is_size(value) and is_size(tiny.get(name)):
            sizes.setdefault(role, []).append((role, value, tiny[name]))
    if sizes.get("heads") and sizes.get("kv_heads"):
        (_, heads, tiny_heads), (_, kv_heads, tiny_kv_heads) = sizes["heads"][0], sizes["kv_heads"][0]
        if heads % kv_heads == 0 and tiny_heads % tiny_kv_heads == 0:
            sizes["group"] = [("group", heads // kv_heads, tiny_heads // tiny_kv_heads)]
    return [entry for role in _TIE_ROLES for entry in sizes.get(role, [])]


def _tied_sizes(
    config_class: type[PreTrainedConfig],
    values: Mapping[str, Any],
    tiny: Mapping[str, Any],
    related_sizes: Sequence[tuple[str, int, int]],
) -> dict[str, int]:
    """The sizes no rule scaled, each at the tiny value of the size its default equals.

    Validators tie such a size to another (dots3_note's vision ``adapter_in_dim`` must equal its
    ``hidden_size``, its ``adapter_out_dim`` the text config's; inkling2's vision ``text_hidden_size`` the
    text ``hidden_size``; kolibri1_1's ``index_num_heads`` at most the query heads per key/value head),
    and the default that satisfies the validator shows which. ``related_sizes`` are those of the configs
    this one sits with (a composite's sub-configs, the text config's first). Own hidden size first, then
    the related hidden sizes, then the other sizes, own before related.
    """
    own = _size_table(config_class, values, tiny)
    table = [
        *(entry for entry in own if entry[0] == "hidden"),
        *(entry for entry in related_sizes if entry[0] == "hidden"),
        *(entry for entry in own if entry[0] != "hidden"),
        *(entry for entry in related_sizes if entry[0] != "hidden"),
    ]
    tied = {}
    for name, value in values.items():
        if name in tiny or name.endswith("_token_id") or _role(config_class, name) is not None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            continue
        words = set(name.split("_"))
        counts_heads = bool(words & {"head", "heads"}) and not words & {"dim", "size"}
        is_width = bool(words & {"dim", "size", "hidden", "width"}) and not counts_heads
        for role, default, small in table:
            # a head count ties to a head count, a width to a width (a subsampling factor of 8 is no head count)
            if default == value and (counts_heads if role in ("heads", "group") else is_width):
                tied[name] = small
                break
    return tied


_COMMON: Mapping[str, Any] = MappingProxyType(
    {"attn_implementation": "eager", "num_labels": TINY["num_labels"], "dtype": "float32"}
)


def tiny_config_for(config_class: type[_C], **overrides: Any) -> _C:
    """``config_class`` at tiny, pairwise-distinct sizes; fp32, eager attention, no dropout.

    The generic rules (module docstring) apply first, then :data:`MODEL_OVERRIDES` for the model_type,
    then ``overrides``. If the class rejects an explicit ``head_dim`` that differs from
    ``hidden / heads`` (its own validation raises), the head dim falls back to ``hidden / heads``; if
    it rejects both, the sizes no rule names are tied to the sizes their defaults equal
    (``tie_sizes`` of :func:`tiny_overrides_for`: a validator tying one size to another) and both head
    dims are tried again.
    """
    errors: list[Exception] = []
    for tie_sizes, explicit in itertools.product((False, True), (True, False)):
        tiny = tiny_overrides_for(config_class, head_dim_explicit=explicit, tie_sizes=tie_sizes)
        kwargs = {**_COMMON, **tiny, **overrides}
        try:
            return config_class(**kwargs)
        except (StrictDataclassError, ValueError, TypeError) as error:  # the class's own validation
            errors.append(error)
    raise errors[0]


def weight_dims(config: PreTrainedConfig) -> dict[str, int]:
    """The dims of ``config`` that become weight shapes, by name, for the pairwise-distinct check.

    ``q_out`` (heads * head_dim) is left out where the model derives the head dim (it is then
    ``hidden_size`` by construction); ``kv_out`` where there are as many kv heads as heads (MLA).
    """
    text = config.get_text_config()
    stored = vars(text)

    def names_of(role: str) -> tuple[str, ...]:
        by_pattern = sorted(name for name in stored if name not in _NAME_ROLE and _role_by_pattern(name) == role)
        return (*_ROLE_NAMES[role], *by_pattern)

    def get(*names: str) -> int | None:
        for name in names:
            value = stored.get(name)
            target = (getattr(type(text), "attribute_map", None) or {}).get(name, name)
            if value is None and _NAME_ROLE.get(target) in (None, _NAME_ROLE.get(name)):
                value = stored.get(target)  # an alias, unless it points at another role (deepseek_v4)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    dims: dict[str, int | None] = {
        "hidden": get("hidden_size", "d_model", "n_embd"),
        "intermediate": get(*_ROLE_NAMES["intermediate"]),
        "vocab": get("vocab_size"),
        "moe_intermediate": get(*names_of("moe_intermediate")),
        "dense_intermediate": get(*names_of("dense_intermediate")),
        "shared_intermediate": get(*names_of("shared_intermediate")),
        "experts": get(*_ROLE_NAMES["experts"]),
    }
    heads = get(*_ROLE_NAMES["heads"])
    kv_heads = get(*_ROLE_NAMES["kv_heads"]) or heads
    head_dim = get(*_ROLE_NAMES["head_dim"])
    if get("kv_lora_rank"):
        nope, rope, v = get("qk_nope_head_dim"), get("qk_rope_head_dim"), get("v_head_dim")
        dims |= {
            "q_lora_rank": get("q_lora_rank"),
            "kv_lora_rank": get("kv_lora_rank"),
            "q_b_out": heads * (nope + rope) if heads and nope and rope else None,
            "kv_b_out": heads * (nope + v) if heads and nope and v else None,
            "o_in": heads * v if heads and v else None,
        }
    elif heads and head_dim:
        if heads * head_dim != dims["hidden"]:
            dims["q_out"] = heads * head_dim
        if kv_heads != heads:
            dims["kv_out"] = kv_heads * head_dim
    return {name: value for name, value in dims.items() if value is not None}
