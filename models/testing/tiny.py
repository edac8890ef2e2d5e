"""Tiny test configs derived from each model's own config class.

A scaffold of any upstream model gets sizes its own config accepts.

:func:`tiny_config_for` starts from the config class's defaults and scales every size-like attribute
down to tiny, pairwise-distinct values (so a transposed or mis-sliced weight cannot pass) while keeping
the model's own constraints: heads divisible by kv heads, ``hidden_size`` vs ``head_dim`` as the class
validates it, per-layer lists rebuilt for the tiny depth with every kind of layer the default mixes,
sliding windows shorter than the test sequence, MoE routing that group-limited routers accept, MLA
ranks tiny and distinct, rotary dims even. Slot-visible values (norm eps, aux-loss coefficient) get
non-default values so a dropped or hard-coded argument shows (docs/design.md, "The parity contract").
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
    # the dense MLP of models whose experts take intermediate_size (llama4, minimax_m3, cohere2_moe)
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
    "vocab": ("vocab_size", "vocab_size_per_layer_input"),
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
    "linear_value_heads": ("linear_num_value_heads",),
    "linear_key_head_dim": ("linear_key_head_dim",),
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
        # Full-attention layers take their head dim from the global_head_dim kwarg (default 512).
        "gemma4_text": {"global_head_dim": 24},
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
    return None


def _rebuild_per_layer(values: Sequence[Any], n_layers: int) -> list[Any]:
    """``values`` (one per default layer) cut to ``n_layers``, keeping every kind the default mixes.

    The first ``n_layers`` entries are kept; a kind that only appears later replaces the tail, so e.g.
    gemma3's ``5 sliding : 1 full`` becomes ``[sliding, sliding, full]``.
    """
    kinds: list[Any] = []
    for value in values:
        if value not in kinds:
            kinds.append(value)
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


def _even_rotary_factor(factor: float, head_dim: int) -> float:
    """``factor`` if it gives an even, non-zero rotary dim on ``head_dim``, else 0.5."""
    rotary = int(head_dim * factor)
    if rotary > 0 and rotary % 2 == 0 and math.isclose(rotary, head_dim * factor, abs_tol=1e-6):
        return factor
    return 0.5


def _fix_rope(rope: Any, head_dim: int) -> Any:
    """``rope_parameters`` with every ``partial_rotary_factor`` giving an even rotary dim."""
    if isinstance(rope, Mapping):
        out = {}
        for key, value in rope.items():
            if key == "partial_rotary_factor" and isinstance(value, (int, float)):
                out[key] = _even_rotary_factor(float(value), head_dim)
            elif isinstance(value, Mapping):
                out[key] = _fix_rope(value, head_dim)
            else:
                out[key] = value
        return out
    return rope


def tiny_overrides_for(config_class: type[PreTrainedConfig], *, head_dim_explicit: bool = True) -> dict[str, Any]:
    """The constructor arguments :func:`tiny_config_for` passes (before the caller's overrides).

    ``head_dim_explicit``: give an explicit ``head_dim`` (16, so ``heads * head_dim != hidden``); when
    False the head dim is ``hidden / heads`` (8), for models whose code or validation requires it.
    """
    _, values = _defaults(config_class)
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

    # per-layer lists: layer-index lists keep the indices that exist; one-entry-per-layer lists are
    # rebuilt for the tiny depth keeping every kind
    for name, value in values.items():
        if name in out or default_layers is None or not isinstance(value, (list, tuple)) or not value:
            continue
        if _is_layer_index_list(name, value, default_layers):
            out[name] = [v for v in value if v < n_layers] or [n_layers - 1]
        elif len(value) == default_layers and default_layers > 1:
            out[name] = _rebuild_per_layer(value, n_layers)
    if out.get("mlp_layer_types") and set(out["mlp_layer_types"]) == {"sparse"}:
        # every layer sparse by default, but the "dense" kind is the same config's other branch: layer 0
        # dense so both kinds of MLP are exercised (mellum, inkling, minimax_m3, cohere2_moe)
        out["mlp_layer_types"] = ["dense", *out["mlp_layer_types"][1:]]

    # rope: partial rotary factors giving an even rotary dim on the head dim the rope applies to
    rope_head_dim = out.get("head_dim", head_dim)
    if values.get("rope_parameters"):
        out["rope_parameters"] = _fix_rope(values["rope_parameters"], rope_head_dim)
    if isinstance(values.get("partial_rotary_factor"), float):
        out["partial_rotary_factor"] = _even_rotary_factor(values["partial_rotary_factor"], rope_head_dim)

    # sliding windows: a default-None window stays off unless layer_types asks for sliding layers
    layer_kinds = [str(v) for v in out.get("layer_types", values.get("layer_types") or [])]
    if any("sliding" in kind for kind in layer_kinds):
        for name, role in roles.items():
            if role == "sliding_window" and values[name] is None and name not in out:
                out[name] = TINY["sliding_window"]

    # composite (dbrx, mpt): sub-configs get the same rules
    for name, sub_class in (getattr(config_class, "sub_configs", None) or {}).items():
        if name in values and isinstance(sub_class, type) and issubclass(sub_class, PreTrainedConfig):
            sub = _sub_overrides(sub_class, values[name])
            if sub:
                out[name] = sub

    out.update(_TOKEN_IDS)
    out.update(MODEL_OVERRIDES.get(getattr(config_class, "model_type", ""), {}))
    return out


def _sub_overrides(sub_class: type[PreTrainedConfig], current: Any) -> dict[str, Any]:
    """A sub-config (dbrx's ``attn_config`` / ``ffn_config``, mpt's ``attn_config``) under the same rules.

    Returned as the dict of the sub-config's own fields, which the parent accepts in place of the object.
    """
    if isinstance(current, PreTrainedConfig):
        current = vars(current)
    if not isinstance(current, Mapping):
        return {}
    _, own = _defaults(sub_class)
    own = {k: v for k, v in own.items() if k not in _TOKEN_IDS}
    sub = {k: current[k] for k in own if k in current}
    tiny = tiny_overrides_for(sub_class)
    return {**sub, **{k: v for k, v in tiny.items() if k in own}}


_COMMON: Mapping[str, Any] = MappingProxyType(
    {"attn_implementation": "eager", "num_labels": TINY["num_labels"], "dtype": "float32"}
)


def tiny_config_for(config_class: type[_C], **overrides: Any) -> _C:
    """``config_class`` at tiny, pairwise-distinct sizes; fp32, eager attention, no dropout.

    The generic rules (module docstring) apply first, then :data:`MODEL_OVERRIDES` for the model_type,
    then ``overrides``. If the class rejects an explicit ``head_dim`` that differs from
    ``hidden / heads`` (its own validation raises), the head dim falls back to ``hidden / heads``.
    """
    errors: list[Exception] = []
    for explicit in (True, False):
        kwargs = {**_COMMON, **tiny_overrides_for(config_class, head_dim_explicit=explicit), **overrides}
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
        "moe_intermediate": get(*_ROLE_NAMES["moe_intermediate"]),
        "dense_intermediate": get(*_ROLE_NAMES["dense_intermediate"]),
        "shared_intermediate": get(*_ROLE_NAMES["shared_intermediate"]),
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
