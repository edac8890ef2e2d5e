# ====================================================================================================
# GENERATED FILE - DO NOT EDIT BY HAND.
# Regenerate with: patchgen models.mistral_large4.mistral_large4_gpu_patch_gen_config
# Source: transformers.models.mistral_large4.modeling_mistral_large4 (transformers==5.25.0)
# Config: models.mistral_large4.mistral_large4_gpu_patch_gen_config
# Description: MistralLarge4 with op-slot guards and slot-backed losses
# Fingerprint: c3af0b9185f1339ce06b
# Patches:
#   - override_method MistralLarge4RMSNorm.forward: rms_norm slot guard
#   - override_method MistralLarge4TextMLP.forward: the whole MLP behind the gated_mlp slot
#   - modify_init MistralLarge4MultiModalProjector: record the activation's name for the slot guard
#   - override_method MistralLarge4MultiModalProjector.forward: layer_norm and activation slot guards at the module calls
#   - override_method MistralLarge4TextIndexer.forward: DSA indexer's scores, mask and top-k behind the dsa_indexer slot
#   - override_method MistralLarge4Model.__init__: the towers are generated classes, chosen by the sub-configs' model_type
#   - override_method MistralLarge4Model.dummy_forward: a zero loss term through the vision tower and the projector, for ranks without images
#   - override_method MistralLarge4Model.forward: sequence-parallel aware: this rank's placeholder features, dummy towers, dict masks
#   - override_method MistralLarge4ForConditionalGeneration.forward: logits and loss behind the causal_lm_loss slot
#   - override_method MistralLarge4TextMoE.forward: routed experts behind the moe_experts slot
#   - override_method MistralLarge4ForConditionalGeneration.get_parallel_plan: expert-parallel plan of the fused expert tensors
#   - override_method MistralLarge4PreTrainedModel.is_custom_code: upstream's checkpoint conversions apply, both ways
#   - override_method MistralLarge4PreTrainedModel.from_pretrained: strict loading by default; strict=False is upstream's
#   - override_method MistralLarge4PreTrainedModel.get_correct_attn_implementation: fused_attention registered when a model asks for it
# ====================================================================================================
# Copyright 2026 HuggingFace Inc. team. All rights reserved.
#
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, KVSharingDict
from transformers.generation import GenerationMixin
from transformers.integrations import use_experts_implementation, use_kernel_forward_from_hub
from transformers.masking_utils import create_causal_mask, find_packed_sequence_indices
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MoeModelOutputWithPast,
    MultimodalMoeBaseModelOutputWithPast,
    MultimodalMoeCausalLMOutputWithPast,
)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update, yarn_apply_mscale
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel, slice_logits_to_keep
from transformers.models.mistral_large4.configuration_mistral_large4 import (
    MistralLarge4Config,
    MistralLarge4TextConfig,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, auto_docstring, can_return_tuple, logging, torch_compilable_check
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs, select_hidden_states

from modelgraft.models.attention import FUSED_ATTENTION, register_fused_attention
from modelgraft.models.composition import build_sub_model
from modelgraft.models.ops.slots import (
    activation_slot,
    causal_lm_loss_slot,
    dsa_indexer_slot,
    gated_mlp_slot,
    moe_experts_slot,
    placeholder_features_slot,
    rms_norm_slot,
)
from modelgraft.models.pretrained import require_complete_load
from modelgraft.models.upstream_version import require_generated_from

require_generated_from("transformers", "5.25.0", __name__)


# [HELPERS]: a call whose packed documents need the mask builder
def packs_text_documents(position_ids: Any, attention_mask: Any, cache: Any) -> bool:
    """Whether a composed VLM's call packs documents its text model's mask builder would not see.

    True for ``[B, L]`` position ids that restart somewhere, called with no attention mask and no cache: the
    language model builds its mask from them only when it gets no cache, and upstream's creates one whenever
    ``use_cache`` is on. The restarts are found by transformers' ``find_packed_sequence_indices``, the function
    the mask builder then applies.
    """
    if attention_mask is not None or cache is not None or position_ids is None or position_ids.ndim != 2:
        return False
    return find_packed_sequence_indices(position_ids) is not None


# [HELPERS]: a tower's features of this rank's placeholders
def placeholder_outputs(outputs: Any, mask: Any, features: str, layers: str | None = None) -> Any:
    """A tower's ``outputs`` with ``features`` (and the per-layer ``layers``) cut to the placeholders of ``mask``.

    ``outputs.<features>`` holds the tower's features of every placeholder of the batch (one tensor, one per
    image stacked (InternVL's ``[images, tokens, hidden]``, flattened here to rows), or a tuple of one per image,
    concatenated here into a tuple of one), and so does each of ``outputs.<layers>`` (Qwen3-VL's
    deepstack features: one tensor, or one tuple per layer); the ``placeholder_features`` slot keeps those of this
    process's positions, so upstream's statements that follow (the count check, the scatter, the deepstack merge)
    run unchanged on this rank's slice of the sequence.
    """

    def selected(value: Any) -> Any:
        if isinstance(value, (tuple, list)):
            return (placeholder_features_slot(mask, torch.cat(list(value), dim=0)),)
        return placeholder_features_slot(mask, value.flatten(0, -2) if value.dim() > 2 else value)

    setattr(outputs, features, selected(getattr(outputs, features)))
    if layers is not None and getattr(outputs, layers, None) is not None:
        setattr(outputs, layers, [selected(layer) for layer in getattr(outputs, layers)])
    return outputs


# [HELPERS]: zero from the towers a batch does not feed
def with_tower_dummies(inputs_embeds: Any, *towers: Any) -> Any:
    """``inputs_embeds`` plus exactly zero from each given tower's ``dummy_forward`` (None: that call ran).

    A rank whose batch lacks an input of a tower call (no image, no video, no audio) runs the tower once in its
    place, so every rank makes the same tower calls (FSDP's collectives of the tower's blocks stay in step) and
    every tower parameter gets a gradient, zero, instead of None.
    """
    for tower in towers:
        if tower is not None:
            inputs_embeds = inputs_embeds + tower.dummy_forward().to(inputs_embeds.dtype)
    return inputs_embeds


logger = logging.get_logger(__name__)


# [MODIFIED CLASS] MistralLarge4RMSNorm
@use_kernel_forward_from_hub("RMSNorm")
class MistralLarge4RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps: float = 1e-6) -> None:
        """
        MistralLarge4RMSNorm is equivalent to T5LayerNorm
        """
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    # [PATCHED METHOD] MistralLarge4RMSNorm.forward: rms_norm slot guard
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if rms_norm_slot.use_non_eager_impl:
            return rms_norm_slot(hidden_states, self.weight, self.variance_epsilon)
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self):
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class MistralLarge4TextRotaryEmbedding(nn.Module):
    """LlamaRotaryEmbedding with a learned tensor for scaling the inverse frequencies."""

    def __init__(self, config: MistralLarge4TextConfig) -> None:
        super().__init__()
        self.max_seq_len_cached = config.max_position_embeddings
        self.original_max_seq_len = config.max_position_embeddings

        self.config = config

        self.rope_type = self.config.rope_parameters["rope_type"]
        rope_init_fn: Callable = self.compute_default_rope_parameters
        if self.rope_type != "default":
            rope_init_fn = ROPE_INIT_FUNCTIONS[self.rope_type]
        inv_freq, self.attention_scaling = rope_init_fn(self.config)

        self.inv_freq = nn.Buffer(inv_freq, persistent=False)
        self.original_inv_freq = nn.Buffer(inv_freq.clone(), persistent=False)
        self.alpha = nn.Parameter(
            torch.zeros_like(self.inv_freq, dtype=torch.float32)
        )  # init to 0 to avoid NaNs in alpha.exp()

    @staticmethod
    def compute_default_rope_parameters(config: MistralLarge4TextConfig, **kwargs) -> tuple[torch.Tensor, float]:
        """
        Computes the inverse frequencies according to the original RoPE implementation
        Args:
            config ([`~transformers.PreTrainedConfig`]):
                The model configuration.
        Returns:
            Tuple of (`torch.Tensor`, `float`), containing the inverse frequencies for the RoPE embeddings and the
            post-processing scaling factor applied to the computed cos/sin (unused in this type of RoPE).
        """
        base = config.rope_parameters["rope_theta"]
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads

        attention_factor = 1.0  # Unused in this type of RoPE
        # Compute the inverse frequencies
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        return inv_freq, attention_factor

    @dynamic_rope_update  # power user: used with advanced RoPE types (e.g. dynamic rope)
    def forward(self, x, position_ids):
        scaled_inv_freq = (
            self.inv_freq.to(device=x.device, dtype=torch.float)
            * self.alpha.to(device=x.device, dtype=torch.float).exp()
        )
        freqs = position_ids[..., None].float() * scaled_inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling

        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class MistralLarge4TextSoftmaxScaling(nn.Module):
    def __init__(self, num_heads: int):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(num_heads))
        self.bias = nn.Parameter(torch.empty(num_heads))

    def forward(self, query_states: torch.Tensor, position_ids: torch.Tensor, head_dim_first: bool) -> torch.Tensor:
        log_pos = (position_ids + 1).float().log()  # convert to float to avoid overflow
        log_pos, scale, bias = (x.to(query_states.dtype) for x in (log_pos, self.scale, self.bias))
        if head_dim_first:
            scale = scale[None, :, None] * log_pos[:, None, :] + bias[None, :, None]
        else:
            scale = scale[None, None, :] * log_pos[:, :, None] + bias[None, None, :]
        return query_states * scale.unsqueeze(-1)


def apply_rotary_pos_emb_interleave(
    q: torch.Tensor, k: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""
    Applies interleaved Rotary Position Embedding to the query and (optionally) the key tensors.

    DeepSeek lays the rotary dimensions out in interleaved pairs `(x0, x1), (x2, x3), ...`, each rotated by a
    single frequency. We compute that rotation directly on the even/odd slices instead of de-interleaving with a
    `view`/`transpose`/`reshape`; the output is bit-identical to the de-interleaved `rotate_half` formulation while
    avoiding the extra contiguous copy.

    Args:
        q (`torch.Tensor`): The query tensor.
        k (`torch.Tensor`, *optional*): The key tensor if there is one, otherwise `None`.
        cos (`torch.Tensor`): The cosine part of the rotary embedding.
        sin (`torch.Tensor`): The sine part of the rotary embedding.
        unsqueeze_dim (`int`, *optional*, defaults to 1):
            The 'unsqueeze_dim' argument specifies the dimension along which to unsqueeze cos[position_ids] and
            sin[position_ids] so that they can be properly broadcasted to the dimensions of q and k. For example, note
            that cos[position_ids] and sin[position_ids] have the shape [batch_size, seq_len, head_dim]. Then, if q and
            k have the shape [batch_size, heads, seq_len, head_dim], then setting unsqueeze_dim=1 makes
            cos[position_ids] and sin[position_ids] broadcastable to the shapes of q and k. Similarly, if q and k have
            the shape [batch_size, seq_len, heads, head_dim], then set unsqueeze_dim=2.
    Returns:
        `tuple(torch.Tensor)` comprising of the query and (optionally) the key tensors rotated using the Rotary Position
        Embedding.
    """
    # `cos`/`sin` are `cat(freqs, freqs)`; the first half holds the per-pair angle.
    cos = cos[..., : cos.shape[-1] // 2].unsqueeze(unsqueeze_dim)
    sin = sin[..., : sin.shape[-1] // 2].unsqueeze(unsqueeze_dim)

    q1, q2 = q[..., 0::2], q[..., 1::2]
    q_embed = torch.cat([q1 * cos - q2 * sin, q2 * cos + q1 * sin], dim=-1)

    if k is not None:
        k1, k2 = k[..., 0::2], k[..., 1::2]
        k_embed = torch.cat([k1 * cos - k2 * sin, k2 * cos + k1 * sin], dim=-1)
    else:
        k_embed = None

    return q_embed, k_embed


# [MODIFIED CLASS] MistralLarge4TextIndexer
class MistralLarge4TextIndexer(nn.Module):
    """Indexer from glm_moe_dsa, but since there is no Q-LoRA in the attention, the indexer queries are derived from
    hidden states, using norm -> proj -> softmax scaling. Also, for layers with no RoPE, the indexer does not use RoPE
    as well."""

    def __init__(self, config: MistralLarge4TextConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx

        self.hidden_size: int = config.hidden_size
        self.n_heads: int = config.index_n_heads
        self.head_dim: int = config.index_head_dim
        self.qk_rope_head_dim: int = config.qk_rope_head_dim
        self.index_topk: int = config.index_topk
        self.wq_b = nn.Linear(config.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(self.hidden_size, self.head_dim, bias=False)
        self.k_norm = nn.LayerNorm(self.head_dim, eps=1e-6)
        self.weights_proj = nn.Linear(self.hidden_size, self.n_heads, bias=False)
        self.softmax_scale = self.head_dim**-0.5
        self.q_input_norm = nn.LayerNorm(config.hidden_size, eps=1e-6)
        self.softmax_scaling = MistralLarge4TextSoftmaxScaling(self.n_heads)
        self.use_rope = config.no_rope_layers[layer_idx]

    # [PATCHED METHOD] MistralLarge4TextIndexer.forward: DSA indexer's scores, mask and top-k behind the dsa_indexer slot
    @torch.no_grad()
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Cache | None = None,
    ) -> torch.Tensor:
        """
        Selects the top-k tokens per query for DeepSeek Sparse Attention (DSA).

        Same as [`DeepseekV32Indexer.forward`], but the indexer applies **interleaved** RoPE
        rather than the non-interleaved half-split RoPE used by DeepSeek-V3.2.

        Args:
            hidden_states: Input hidden states `[B, S, hidden_size]`.
            position_embeddings: `(cos, sin)` from RotaryEmbedding.
            attention_mask: Causal mask, broadcastable to `[B, S, T]`.
            cache: Cache object containing the indexer key cache for this layer.

        Returns:
            `torch.Tensor`: the `int32` top-k token indices of shape `[B, S, topk]`. The eager / SDPA paths
                turn these into an additive sparse mask; the `flash-mla` kernel consumes them directly.
        """
        batch_size, seq_len, _ = hidden_states.shape
        cos, sin = position_embeddings

        # The indexer queries are derived directly from the hidden states
        q = self.q_input_norm(hidden_states)
        q = self.wq_b(q)  # [B, S, H*D]
        q = q.view(batch_size, seq_len, self.n_heads, self.head_dim)  # [B, S, H, D]
        q = self.softmax_scaling(q, position_ids, head_dim_first=False)

        # Same for the keys
        k = self.k_norm(self.wk(hidden_states)).unsqueeze(2)  # [B, S, 1, D]

        # If there is RoPE, apply it (interleaved)
        if self.use_rope:
            q_rot, q_pass = torch.split(q, [self.qk_rope_head_dim, self.head_dim - self.qk_rope_head_dim], dim=-1)
            k_rot, k_pass = torch.split(k, [self.qk_rope_head_dim, self.head_dim - self.qk_rope_head_dim], dim=-1)
            q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
            q = torch.cat([q_rot, q_pass], dim=-1)  # [B, S, H, D]
            k = torch.cat([k_rot, k_pass], dim=-1)  # [B, S, 1, D]
        k = k.squeeze(2)

        if cache is not None:
            k = cache.update_indexer(k, self.layer_idx)

        if dsa_indexer_slot.use_non_eager_impl:
            return dsa_indexer_slot(
                q,
                k,
                hidden_states,
                self.weights_proj.weight,
                attention_mask,
                position_ids,
                softmax_scale=self.softmax_scale,
                weights_scaling=self.n_heads**-0.5,
                index_topk=self.index_topk,
            )
        else:
            scores = torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * self.softmax_scale
            scores = F.relu(scores)

            # Weight per head and sum across heads: [B, S, 1, H] @ [B, S, H, T] → [B, S, T]
            weights = self.weights_proj(hidden_states.to(self.weights_proj.weight.dtype)).float() * (
                self.n_heads**-0.5
            )
            index_scores = torch.matmul(weights.unsqueeze(-2), scores).squeeze(-2)

            # Causality needs to be taken into account when computing scores so padding tokens don't affect computation
            if attention_mask.dtype == torch.bool:
                index_scores = index_scores.masked_fill(~attention_mask, float("-inf"))
            else:
                index_scores = index_scores + attention_mask

            topk = min(self.index_topk, index_scores.shape[-1])
            return index_scores.topk(topk, dim=-1).indices.to(torch.int32)  # [B, S, topk]


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """
    This is the equivalent of torch.repeat_interleave(x, dim=1, repeats=n_rep). The hidden states go from (batch,
    num_key_value_heads, seqlen, head_dim) to (batch, num_attention_heads, seqlen, head_dim)
    """
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Unpack[TransformersKwargs],
):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)

    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask

    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()

    return attn_output, attn_weights


class MistralLarge4TextAttention(nn.Module):
    """DSA attention from GlmMoeDsa, with no Q-LoRA and KV sharing."""

    def __init__(self, config: MistralLarge4TextConfig, layer_idx: int):
        super().__init__()
        self.use_rope = config.no_rope_layers[layer_idx]
        self.is_kv_shared_layer = config.kv_sharing_modes[layer_idx] in ("reuse", "reuse_but_indexer")
        self.store_full_length_kv = config.kv_sharing_modes[layer_idx] == "store"
        self.config = config
        self.layer_idx = layer_idx
        self.attention_dropout = config.attention_dropout
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.qk_rope_head_dim = config.qk_rope_head_dim if self.use_rope else 0
        self.kv_lora_rank = config.kv_lora_rank
        self.v_head_dim = config.v_head_dim
        self.qk_nope_head_dim = config.qk_nope_head_dim + (0 if self.use_rope else config.qk_rope_head_dim)
        self.qk_head_dim = config.qk_nope_head_dim + config.qk_rope_head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads

        self.is_causal = True
        self.kv_a_proj_with_mqa = (
            nn.Linear(self.hidden_size, config.kv_lora_rank + self.qk_rope_head_dim, bias=config.attention_bias)
            if not self.is_kv_shared_layer
            else None
        )
        self.kv_a_layernorm = (
            MistralLarge4RMSNorm(config.kv_lora_rank, eps=config.rms_norm_eps) if not self.is_kv_shared_layer else None
        )
        self.kv_b_proj = nn.Linear(
            config.kv_lora_rank,
            self.num_heads * (self.qk_nope_head_dim + self.v_head_dim),
            bias=False,
        )

        self.o_proj = nn.Linear(
            self.num_heads * self.v_head_dim,
            self.hidden_size,
            bias=config.attention_bias,
        )

        self.scaling = yarn_apply_mscale(config.rope_parameters, self.qk_head_dim ** (-0.5))
        # Refer: https://arxiv.org/abs/2603.12201 for more details.
        self.skip_topk = config.indexer_types[layer_idx] == "shared"
        self.indexer = None if self.skip_topk else MistralLarge4TextIndexer(config, layer_idx)

        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.qk_head_dim, bias=False)
        self.softmax_scaling = MistralLarge4TextSoftmaxScaling(self.num_heads)

    def expand_kv(self, kv_nope: torch.Tensor, k_rot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Expands the compressed latents into key and value states. Args:
            - kv_nope: key + value without positional encoding, shape [batch_size, 1, seqlen, self.kv_lora_rank]
            - k_rot: shared key with positional encoding, shape [batch_size, 1, seqlen, self.qk_rope_head_dim]
        Returns the key and value states, two tensors of shape [batch, num_heads, seq, (k or v)_head_dim].
        """
        batch_size, _, seq_length, _ = kv_nope.shape
        key_shape = (batch_size, seq_length, -1, self.qk_nope_head_dim + self.v_head_dim)

        kv_nope = self.kv_b_proj(kv_nope).view(key_shape).transpose(1, 2)
        k_nope, value_states = torch.split(kv_nope, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k_rot = k_rot.expand(-1, k_nope.shape[1], -1, -1)  # does not affect the underlying storage

        # Concatenate k_nope and k_rot in a new tensor
        key_states = kv_nope.new_empty(*kv_nope.shape[:-1], self.qk_nope_head_dim + self.qk_rope_head_dim)
        key_states[..., : self.qk_nope_head_dim].copy_(k_nope)
        key_states[..., self.qk_nope_head_dim :].copy_(k_rot)
        return key_states, value_states

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor,
        shared_kv_states: KVSharingDict,
        position_ids: torch.Tensor,
        cache: Cache | None = None,
        prev_topk_indices: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        batch_size, seq_length = hidden_states.shape[:-1]
        query_shape = (batch_size, seq_length, -1, self.qk_head_dim)

        q_states = self.q_proj(hidden_states).view(query_shape).transpose(1, 2)
        q_pass, q_rot = torch.split(q_states, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)

        # Either the layer computes it's own cache or it loads it from shared_kv_states
        if self.is_kv_shared_layer:
            k_pass, k_rot = shared_kv_states["rope" if self.use_rope else "nope"]
        else:
            compressed_kv = self.kv_a_proj_with_mqa(hidden_states)
            kv_pass, k_rot = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
            # Both latents are viewed as single-head, 4D tensors, as expected by `expand_kv`
            k_pass = self.kv_a_layernorm(kv_pass).view(batch_size, 1, seq_length, self.kv_lora_rank)
            k_rot = k_rot.view(batch_size, 1, seq_length, self.qk_rope_head_dim)

        # Apply LeRoPE to the queries and the keys, except if this is a no_rope layer
        if self.use_rope:
            cos, sin = position_embeddings
            # For layers with cache sharing, only rotate the queries: the keys were already rotated by the source layer
            if self.is_kv_shared_layer:
                q_rot, _ = apply_rotary_pos_emb_interleave(q_rot, None, cos, sin)
            else:
                q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin)

        # Update the cache while latent KV is still compressed
        if cache is not None and not self.is_kv_shared_layer:
            k_pass, k_rot = cache.update(k_pass, k_rot, self.layer_idx, kwargs=kwargs)
        # If the layer takes part in cache sharing and computes its own cache, store a copy in shared_kv_states
        if self.store_full_length_kv:
            shared_kv_states["rope" if self.use_rope else "nope"] = (k_pass, k_rot)

        # Recompose and apply softmax-scaling to the queries
        query_states = torch.cat((q_pass, q_rot), dim=-1)
        query_states = self.softmax_scaling(query_states, position_ids, head_dim_first=True)

        key_states, value_states = self.expand_kv(k_pass, k_rot)

        # DSA: select this layer's top-k tokens, or reuse the previous full layer's on `"shared"` layers.
        if self.indexer is not None:
            topk_indices = self.indexer(
                hidden_states,
                position_embeddings,
                attention_mask[:, 0, :, :],
                position_ids,  # Kept for BC
                cache=cache,
            )  # [B, S, topk]
        else:
            if prev_topk_indices is None:
                raise ValueError("Shared DSA layers require top-k indices from a previous full indexer layer.")
            topk_indices = prev_topk_indices

        sparse_indices = None
        if self.config._attn_implementation in ("eager", "sdpa"):
            index_mask = (
                topk_indices.new_ones((batch_size, seq_length, key_states.shape[2]), dtype=torch.bool)
                .scatter(-1, topk_indices.long(), False)
                .unsqueeze(1)
            )

            if attention_mask.dtype == torch.bool:
                attention_mask = attention_mask & ~index_mask
            else:
                attention_mask = attention_mask.masked_fill(index_mask, torch.finfo(hidden_states.dtype).min)
        else:
            sparse_indices = topk_indices

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            indices=sparse_indices,  # consumed by flash_mla_with_kvcache; ignored by eager / SDPA
            position_ids=position_ids,
            **kwargs,
        )

        attn_output = attn_output.reshape(batch_size, seq_length, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights, topk_indices


# [MODIFIED CLASS] MistralLarge4TextMLP
class MistralLarge4TextMLP(nn.Module):
    def __init__(self, config, intermediate_size=None):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size if intermediate_size is None else intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    # [PATCHED METHOD] MistralLarge4TextMLP.forward: the whole MLP behind the gated_mlp slot
    def forward(self, x):
        if gated_mlp_slot.use_non_eager_impl:
            return gated_mlp_slot(
                x,
                self.gate_proj.weight,
                self.up_proj.weight,
                self.down_proj.weight,
                self.config.hidden_act,
                gate_bias=self.gate_proj.bias,
                up_bias=self.up_proj.bias,
                down_bias=self.down_proj.bias,
            )
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj


class MistralLarge4TextTopkRouter(nn.Module):
    """Same as Mistral4TopkRouter, with fp32 precision for routing logits and norming of topk weights is always on."""

    def __init__(self, config):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.num_experts = config.num_local_experts
        self.hidden_dim = config.hidden_size
        self.weight = nn.Parameter(torch.zeros(self.num_experts, self.hidden_dim, dtype=torch.float32))
        self.routed_scaling_factor = config.routed_scaling_factor
        self.num_group = config.n_group
        self.topk_group = config.topk_group

    def forward(self, hidden_states):
        hidden_states = hidden_states.view(-1, self.hidden_dim)
        # weight.float() should be a no-op because the weight is in _keep_in_fp32_modules_strict, but if a user changed
        # the dtype of the model after loading, it will prevent an error
        router_logits = F.linear(hidden_states.float(), self.weight.float())
        scores = router_logits.softmax(-1)
        group_scores = (
            scores.view(-1, self.num_group, self.num_experts // self.num_group).topk(2, dim=-1)[0].sum(dim=-1)
        )
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = (
            group_mask.unsqueeze(-1)
            .expand(-1, self.num_group, self.num_experts // self.num_group)
            .reshape(-1, self.num_experts)
        )
        scores_for_choice = scores.masked_fill(~score_mask.bool(), 0.0)
        topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]
        topk_weights = scores.gather(1, topk_indices)
        denominator = topk_weights.sum(dim=-1, keepdim=True) + 1e-20
        topk_weights /= denominator
        topk_weights = topk_weights * self.routed_scaling_factor
        return router_logits, topk_weights, topk_indices


@use_experts_implementation
class MistralLarge4TextExperts(nn.Module):
    """Collection of expert weights stored as 3D tensors."""

    def __init__(self, config):
        super().__init__()
        self.num_experts = config.num_local_experts
        self.hidden_dim = config.hidden_size
        self.intermediate_dim = config.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(self.num_experts, 2 * self.intermediate_dim, self.hidden_dim))
        self.down_proj = nn.Parameter(torch.empty(self.num_experts, self.hidden_dim, self.intermediate_dim))
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(
        self,
        hidden_states: torch.Tensor,
        top_k_index: torch.Tensor,
        top_k_weights: torch.Tensor,
    ) -> torch.Tensor:
        final_hidden_states = torch.zeros_like(hidden_states)
        with torch.no_grad():
            expert_mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()

        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            if expert_idx == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[token_idx]
            gate, up = nn.functional.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current_hidden_states = self.act_fn(gate) * up
            current_hidden_states = nn.functional.linear(current_hidden_states, self.down_proj[expert_idx])
            current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
            final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))

        return final_hidden_states


# [MODIFIED CLASS] MistralLarge4TextMoE
class MistralLarge4TextMoE(nn.Module):
    """
    A mixed expert module containing shared experts.
    """

    def __init__(self, config: MistralLarge4TextConfig):
        super().__init__()
        self.config = config
        self.experts = MistralLarge4TextExperts(config)
        self.gate = MistralLarge4TextTopkRouter(config)
        self.shared_experts = MistralLarge4TextMLP(
            config=config, intermediate_size=config.moe_intermediate_size * config.n_shared_experts
        )

    # [PATCHED METHOD] MistralLarge4TextMoE.forward: routed experts behind the moe_experts slot
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        residuals = hidden_states
        orig_shape = hidden_states.shape
        _, topk_weights, topk_indices = self.gate(hidden_states)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        if moe_experts_slot.use_non_eager_impl:
            hidden_states = moe_experts_slot(
                hidden_states,
                topk_indices,
                topk_weights,
                self.experts.gate_up_proj,
                self.experts.down_proj,
                self.experts.config.hidden_act,
            ).view(*orig_shape)
        else:
            hidden_states = self.experts(hidden_states, topk_indices, topk_weights).view(*orig_shape)
        hidden_states = hidden_states + self.shared_experts(residuals)
        return hidden_states


class MistralLarge4TextDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config: MistralLarge4TextConfig, layer_idx: int):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.self_attn = MistralLarge4TextAttention(config, layer_idx)

        self.mlp = (
            MistralLarge4TextMoE(config)
            if config.mlp_layer_types[layer_idx] == "sparse"
            else MistralLarge4TextMLP(config)
        )
        self.input_layernorm = MistralLarge4RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = MistralLarge4RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        hidden_states: torch.Tensor,
        shared_kv_states: KVSharingDict,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = False,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        prev_topk_indices: torch.Tensor | None = None,  # MAIN DIFF with DSV3.2
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        # Self Attention
        hidden_states, _, topk_indices = self.self_attn(
            hidden_states=hidden_states,
            position_embeddings=position_embeddings,
            attention_mask=attention_mask,
            shared_kv_states=shared_kv_states,  # the forward is overloaded to pass this args
            position_ids=position_ids,
            cache=cache,
            prev_topk_indices=prev_topk_indices,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states, topk_indices


# [MODIFIED CLASS] MistralLarge4PreTrainedModel
@auto_docstring
class MistralLarge4PreTrainedModel(PreTrainedModel):
    config: MistralLarge4Config
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["MistralLarge4TextDecoderLayer"]
    _supports_flash_attn = False  # flash-mla kernels need a bit more work in the way we enable them!
    _supports_sdpa = True
    _supports_flex_attn = False

    _can_compile_fullgraph = True
    _supports_attention_backend = True
    _can_record_outputs = {
        "hidden_states": MistralLarge4TextDecoderLayer,
        "attentions": MistralLarge4TextAttention,
        "router_logits": OutputRecorder(MistralLarge4TextTopkRouter, index=0),
    }
    _keep_in_fp32_modules_strict = ["rotary_emb", "mlp.gate.weight"]
    # The checkpoint ships a multi-token-prediction draft head that this model does not implement yet # TODO
    _keys_to_ignore_on_load_unexpected = [r"mtp_dspark\..*"]
    _keep_in_fp32_modules = ["indexer.weights_proj"]
    input_modalities = ("image", "text")

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, MistralLarge4TextTopkRouter):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
        elif isinstance(module, MistralLarge4TextExperts):
            init.normal_(module.gate_up_proj, mean=0.0, std=self.config.initializer_range)
            init.normal_(module.down_proj, mean=0.0, std=self.config.initializer_range)
        elif isinstance(module, MistralLarge4TextRotaryEmbedding):
            init.zeros_(module.alpha)  # exp(0) = 1: LeRoPE has no effect until `alpha` is loaded
        elif isinstance(module, MistralLarge4TextSoftmaxScaling):
            # 0 * log(pos + 1) + 1 = 1: no query scaling until `scale` / `bias` are loaded
            init.zeros_(module.scale)
            init.ones_(module.bias)

    # [PATCHED METHOD] MistralLarge4PreTrainedModel.is_custom_code: upstream's checkpoint conversions apply, both ways
    @classmethod
    def is_custom_code(cls):
        """False for this module's own classes, so transformers converts their checkpoints as upstream's.

        transformers applies the ``model_type``'s checkpoint conversions (``conversion_mapping.py``) on
        ``from_pretrained`` and ``save_pretrained`` only to classes that are not custom code, and counts every
        class outside ``transformers.`` as custom. This module keeps upstream's parameter names, so its classes
        take upstream's conversions in both directions (docs/design.md, "Upstream's checkpoint conversions").
        Remote code, and a subclass defined in another module, keep upstream's rule.
        """
        if cls.__module__ == __name__:
            return cls.is_remote_code()
        return super().is_custom_code()

    # [PATCHED METHOD] MistralLarge4PreTrainedModel.from_pretrained: strict loading by default; strict=False is upstream's
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, strict=True, **kwargs):
        """PreTrainedModel.from_pretrained, strict by default (docs/design.md, "Strict loading").

        A weight the model has and the checkpoint lacks, or a tensor the checkpoint has and the model lacks,
        raises ``CheckpointError`` naming the checkpoint, the class and the keys, where upstream initialises
        the first, drops the second and only logs both. ``strict=False`` is upstream's behaviour
        (``output_loading_info=True`` returns the keys). Keys upstream itself ignores are not reported, and a
        size mismatch stays upstream's error.
        """
        wants_info = kwargs.pop("output_loading_info", False)
        model, loading_info = super().from_pretrained(
            pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs
        )
        if strict:
            require_complete_load(cls, pretrained_model_name_or_path, loading_info)
        return (model, loading_info) if wants_info else model

    # [PATCHED METHOD] MistralLarge4PreTrainedModel.get_correct_attn_implementation: fused_attention registered when a model asks for it
    def get_correct_attn_implementation(self, requested_attention, is_init_check=False):
        """PreTrainedModel's check of the requested attention, which also accepts ``"fused_attention"``.

        ``"fused_attention"`` (``modelgraft.models.attention``: torch's fused CPU kernel for MLA's head widths,
        sinks and DSA indices) is registered with transformers when a model asks for it, never on import
        (docs/design.md, "Attention implementations on request").
        """
        if requested_attention == FUSED_ATTENTION:
            register_fused_attention()
        return super().get_correct_attn_implementation(requested_attention, is_init_check)


@auto_docstring
class MistralLarge4TextModel(MistralLarge4PreTrainedModel):
    config: MistralLarge4TextConfig

    def __init__(self, config: MistralLarge4TextConfig):
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.layers = nn.ModuleList(
            [MistralLarge4TextDecoderLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
        )
        self.norm = MistralLarge4RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = MistralLarge4TextRotaryEmbedding(config=config)
        self.gradient_checkpointing = False

        # Initialize weights and apply final processing
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    @auto_docstring
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MoeModelOutputWithPast:
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

        if inputs_embeds is None:
            inputs_embeds: torch.Tensor = self.embed_tokens(input_ids)

        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)

        if position_ids is None:
            past_seen_tokens = cache.get_seq_length() if cache is not None else 0
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens
            position_ids = position_ids.unsqueeze(0)

        # It may already have been prepared by e.g. `generate`
        if isinstance(attention_mask, dict):
            causal_mask = attention_mask["indexed_attention"]
        else:
            causal_mask = create_causal_mask(
                config=self.config,
                inputs_embeds=inputs_embeds,
                attention_mask=attention_mask,
                cache=cache,
                position_ids=position_ids,
                allow_is_causal_skip=False,  # Always force creation to account for causality in the indexer
            )

        # Initialize as empty storage and it will be filled in the right layers.
        shared_kv_states = KVSharingDict()

        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids=position_ids)

        topk_indices = None  # MAIN DIFF with DSV3.2
        for decoder_layer in self.layers[: self.config.num_hidden_layers]:
            hidden_states, topk_indices = decoder_layer(
                hidden_states,
                attention_mask=causal_mask,
                position_embeddings=position_embeddings,
                position_ids=position_ids,
                cache=cache,
                shared_kv_states=shared_kv_states,
                use_cache=use_cache,
                prev_topk_indices=topk_indices,  # MAIN DIFF with DSV3.2
                **kwargs,
            )

        hidden_states = self.norm(hidden_states)
        return MoeModelOutputWithPast(
            last_hidden_state=hidden_states,
            cache=cache,
        )


@auto_docstring
@dataclass
class MistralLarge4ModelOutputWithPast(MultimodalMoeBaseModelOutputWithPast):
    @property
    def image_hidden_states(self):
        logger.warning_once(
            "`image_hidden_states` is deprecated and will return a list of all hidden "
            "states per layer from v5.30; Use `out.image_outputs.pooler_output` to obtain pooled features."
        )
        return self.image_outputs.pooler_output


class MistralLarge4PatchMerger(nn.Module):
    """
    Learned merging of spatial_merge_size ** 2 patches
    """

    def __init__(self, config: MistralLarge4Config):
        super().__init__()
        self.config = config

        hidden_size = config.vision_config.hidden_size
        self.spatial_merge_size = config.spatial_merge_size
        self.patch_size = self.config.vision_config.patch_size
        self.merging_layer = nn.Linear(hidden_size * self.spatial_merge_size**2, hidden_size, bias=False)

    def forward(self, image_features: torch.Tensor, image_sizes: torch.Tensor) -> torch.Tensor:
        image_sizes = [
            (image_size[0] // self.patch_size, image_size[1] // self.patch_size) for image_size in image_sizes
        ]

        tokens_per_image = [h * w for h, w in image_sizes]
        d = image_features.shape[-1]

        permuted_tensor = []
        for image_index, image_tokens in enumerate(image_features.split(tokens_per_image)):
            # Reshape image_tokens into a 2D grid
            h, w = image_sizes[image_index]
            image_grid = image_tokens.view(h, w, d).permute(2, 0, 1).unsqueeze(0)
            grid = torch.nn.functional.unfold(
                image_grid, kernel_size=self.spatial_merge_size, stride=self.spatial_merge_size
            )
            grid = grid.view(d * self.spatial_merge_size**2, -1).t()
            permuted_tensor.append(grid)

        image_features = torch.cat(permuted_tensor, dim=0)
        image_features = self.merging_layer(image_features)
        return image_features


# [MODIFIED CLASS] MistralLarge4MultiModalProjector
class MistralLarge4MultiModalProjector(nn.Module):
    def __init__(self, config: MistralLarge4Config):
        super().__init__()
        self.norm = MistralLarge4RMSNorm(config.vision_config.hidden_size, eps=config.text_config.rms_norm_eps)
        self.patch_merger = MistralLarge4PatchMerger(config)
        # We have hidden_size * the number of vision feature layers
        self.num_feature_layers = (
            1 if isinstance(config.vision_feature_layer, int) else len(config.vision_feature_layer)
        )
        self.linear_1 = nn.Linear(
            config.vision_config.hidden_size * self.num_feature_layers,
            config.text_config.hidden_size,
            bias=config.multimodal_projector_bias,
        )
        self.act = ACT2FN[config.projector_hidden_act]
        self.linear_2 = nn.Linear(
            config.text_config.hidden_size, config.text_config.hidden_size, bias=config.multimodal_projector_bias
        )
        # [MODIFIED INIT] MistralLarge4MultiModalProjector: record the activation's name for the slot guard
        self.activation_name = config.projector_hidden_act

    # [PATCHED METHOD] MistralLarge4MultiModalProjector.forward: layer_norm and activation slot guards at the module calls
    def forward(self, image_features: torch.Tensor, image_sizes: torch.Tensor):
        image_features = self.norm(image_features)
        image_features = self.patch_merger(image_features, image_sizes)
        hidden_states = self.linear_1(image_features)
        if activation_slot.use_non_eager_impl:
            hidden_states = activation_slot(hidden_states, self.activation_name)
        else:
            hidden_states = self.act(hidden_states)
        hidden_states = self.linear_2(hidden_states)
        return hidden_states


# [MODIFIED CLASS] MistralLarge4Model
@auto_docstring(
    custom_intro="""
    The MistralLarge4 model which consists of a vision backbone and a language model, without a language modeling head.
    """
)
class MistralLarge4Model(MistralLarge4PreTrainedModel):
    # [PATCHED METHOD] MistralLarge4Model.__init__: the towers are generated classes, chosen by the sub-configs' model_type
    def __init__(self, config: MistralLarge4Config):
        super().__init__(config)
        self.vision_tower = build_sub_model(config.vision_config)

        self.multi_modal_projector = MistralLarge4MultiModalProjector(config)
        self.language_model = build_sub_model(config.text_config)
        self.post_init()

    @merge_with_config_defaults
    @can_return_tuple
    @select_hidden_states("vision_feature_layer")
    @auto_docstring(
        custom_intro="Obtains image last hidden states from the vision tower and apply multimodal projection."
    )
    def get_image_features(
        self,
        pixel_values: torch.Tensor,
        image_sizes: torch.Tensor,
        vision_feature_layer: int | list[int] | list[int] | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple | BaseModelOutputWithPooling:
        image_outputs = self.vision_tower(
            pixel_values,
            image_sizes=image_sizes,
            return_dict=True,
            **kwargs,
        )
        # If we have one vision feature layer, return the corresponding hidden states,
        # otherwise, select the hidden states of each feature layer and concatenate them
        if isinstance(vision_feature_layer, int):
            selected_image_feature = image_outputs.hidden_states[vision_feature_layer]
        else:
            hs_pool = [image_outputs.hidden_states[layer_idx] for layer_idx in vision_feature_layer]
            selected_image_feature = torch.cat(hs_pool, dim=-1)

        image_features = self.multi_modal_projector(selected_image_feature.squeeze(0), image_sizes)
        downsample_ratio = self.vision_tower.patch_size * self.config.spatial_merge_size
        split_sizes = (
            (torch.as_tensor(image_sizes, device=image_features.device) // downsample_ratio).prod(dim=-1).tolist()
        )
        image_outputs.pooler_output = torch.split(image_features.squeeze(0), split_sizes)
        return image_outputs

    def get_placeholder_mask(
        self, input_ids: torch.LongTensor, inputs_embeds: torch.Tensor, image_features: torch.Tensor
    ):
        """
        Obtains multimodal placeholder mask from `input_ids` or `inputs_embeds`, and checks that the placeholder token count is
        equal to the length of multimodal features. If the lengths are different, an error is raised.
        """
        if input_ids is None:
            special_image_mask = inputs_embeds == self.get_input_embeddings()(
                torch.full((), self.config.image_token_id, dtype=torch.long, device=inputs_embeds.device)
            )
            special_image_mask = special_image_mask.all(-1)
        else:
            special_image_mask = input_ids == self.config.image_token_id

        n_image_tokens = special_image_mask.sum()
        n_image_features = image_features.shape[0] * image_features.shape[1]
        special_image_mask = special_image_mask.unsqueeze(-1).to(inputs_embeds.device)
        torch_compilable_check(
            n_image_tokens * inputs_embeds.shape[-1] == image_features.numel(),
            f"Image features and image tokens do not match, tokens: {n_image_tokens}, features: {n_image_features}",
        )
        return special_image_mask

    # [PATCHED METHOD] MistralLarge4Model.forward: sequence-parallel aware: this rank's placeholder features, dummy towers, dict masks
    @merge_with_config_defaults
    @can_return_tuple
    @auto_docstring
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        pixel_values: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        vision_feature_layer: int | list[int] | list[int] | None = None,
        use_cache: bool | None = None,
        image_sizes: torch.Tensor | None = None,
        mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple | MistralLarge4ModelOutputWithPast:
        if packs_text_documents(position_ids, attention_mask, cache):
            use_cache = False
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

        if pixel_values is not None and mm_encoder_outputs is not None:
            raise ValueError("You cannot specify both pixel_values and mm_encoder_outputs at the same time")

        if inputs_embeds is None:
            inputs_embeds = self.get_input_embeddings()(input_ids)

        mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
        if mm_encoder_outputs.get("image") is None and pixel_values is not None:
            if placeholder_features_slot.use_non_eager_impl:
                mm_encoder_outputs["image"] = placeholder_outputs(
                    self.get_image_features(
                        pixel_values=pixel_values,
                        vision_feature_layer=vision_feature_layer,
                        image_sizes=image_sizes,
                        return_dict=True,
                    ),
                    (input_ids == self.config.image_token_id),
                    "pooler_output",
                )
            else:
                mm_encoder_outputs["image"] = self.get_image_features(
                    pixel_values=pixel_values,
                    vision_feature_layer=vision_feature_layer,
                    image_sizes=image_sizes,
                    return_dict=True,
                )

        if mm_encoder_outputs.get("image") is not None:
            image_features = torch.cat(mm_encoder_outputs["image"].pooler_output, dim=0).to(
                inputs_embeds.device, inputs_embeds.dtype
            )
            special_image_mask = self.get_placeholder_mask(
                input_ids, inputs_embeds=inputs_embeds, image_features=image_features
            )
            inputs_embeds = inputs_embeds.masked_scatter(special_image_mask, image_features)

        if placeholder_features_slot.use_non_eager_impl:
            outputs = self.language_model(
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                inputs_embeds=with_tower_dummies(inputs_embeds, self if pixel_values is None else None),
                use_cache=use_cache,
                **kwargs,
            )
        else:
            outputs = self.language_model(
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                inputs_embeds=inputs_embeds,
                use_cache=use_cache,
                **kwargs,
            )

        return MistralLarge4ModelOutputWithPast(**outputs, image_outputs=mm_encoder_outputs.get("image"))

    # [ADDED METHOD] MistralLarge4Model.dummy_forward: a zero loss term through the vision tower and the projector, for ranks without images
    def dummy_forward(self):
        """A zero loss term that runs the vision tower and the projector on one blank image.

        Add it to the loss of a batch without images: the value is exactly zero (the image features, times 0.0,
        summed), so the loss is unchanged, and every parameter the image path uses gets a gradient (zero) instead
        of None.
        """
        vision_config = self.config.vision_config
        weight = next(self.vision_tower.parameters())
        size = vision_config.image_size
        height, width = size if isinstance(size, (list, tuple)) else (size, size)
        pixel_values = torch.zeros(
            1, vision_config.num_channels, height, width, dtype=weight.dtype, device=weight.device
        )
        image_sizes = torch.tensor([[height, width]], device=weight.device)
        features = self.get_image_features(
            pixel_values=pixel_values, image_sizes=image_sizes, return_dict=True
        ).pooler_output
        total = torch.zeros((), dtype=torch.float32, device=weight.device)
        for tensor in features if isinstance(features, (list, tuple)) else (features,):
            total = total + (tensor.float() * 0.0).sum()
        return total


@auto_docstring
@dataclass
class MistralLarge4CausalLMOutputWithPast(MultimodalMoeCausalLMOutputWithPast):
    @property
    def image_hidden_states(self):
        logger.warning_once(
            "`image_hidden_states` is deprecated and will return a list of all hidden "
            "states per layer from v5.30; Use `out.image_outputs.pooler_output` to obtain pooled features."
        )
        return self.image_outputs.pooler_output


# [MODIFIED CLASS] MistralLarge4ForConditionalGeneration
@auto_docstring(
    custom_intro="""
    The MISTRAL_LARGE4 model which consists of a vision backbone and a language model.
    """
)
class MistralLarge4ForConditionalGeneration(MistralLarge4PreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.language_model.embed_tokens.weight"}
    _tp_plan = {"lm_head": "colwise_gather_output"}

    def __init__(self, config: MistralLarge4Config):
        super().__init__(config)
        self.model = MistralLarge4Model(config)
        self.lm_head = nn.Linear(config.text_config.hidden_size, config.text_config.vocab_size, bias=False)
        self.final_logit_softcapping = self.config.get_text_config().final_logit_softcapping
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    @merge_with_config_defaults
    @can_return_tuple
    @auto_docstring
    def get_image_features(
        self,
        pixel_values: torch.Tensor,
        image_sizes: torch.Tensor,
        vision_feature_layer: int | list[int] | list[int] | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple | BaseModelOutputWithPooling:
        return self.model.get_image_features(
            pixel_values=pixel_values,
            image_sizes=image_sizes,
            vision_feature_layer=vision_feature_layer,
            **kwargs,
        )

    # [PATCHED METHOD] MistralLarge4ForConditionalGeneration.forward: logits and loss behind the causal_lm_loss slot
    @merge_with_config_defaults
    @can_return_tuple
    @auto_docstring
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        pixel_values: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        image_sizes: torch.Tensor | None = None,
        mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple | MistralLarge4CausalLMOutputWithPast:
        r"""
        Example:

        ```python
        >>> from PIL import Image
        >>> from huggingface_hub.utils import httpx
        >>> from io import BytesIO
        >>> from transformers import AutoProcessor, MistralLarge4ForConditionalGeneration

        >>> model = MistralLarge4ForConditionalGeneration.from_pretrained("mistralai/Mistral-Small-3.1-24B-Instruct-2503")
        >>> processor = AutoProcessor.from_pretrained("mistralai/Mistral-Small-3.1-24B-Instruct-2503")

        >>> prompt = "<s>[INST][IMG]What is the image?[/INST]"
        >>> url = "http://images.cocodataset.org/val2017/000000039769.jpg"
        >>> with httpx.stream("GET", url) as response:
        ...     image = Image.open(BytesIO(response.read()))

        >>> inputs = processor(images=image, text=prompt, return_tensors="pt")

        >>> # Generate
        >>> generate_ids = model.generate(**inputs, max_new_tokens=15)
        >>> processor.batch_decode(generate_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)[0]
        "What is the image?The image depicts two cats lying on a pink blanket."
        ```"""
        outputs = self.model(
            input_ids=input_ids,
            pixel_values=pixel_values,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            image_sizes=image_sizes,
            mm_encoder_outputs=mm_encoder_outputs,
            **kwargs,
        )

        hidden_states = outputs[0]
        hidden_states = slice_logits_to_keep(hidden_states, logits_to_keep)
        if labels is not None and causal_lm_loss_slot.use_non_eager_impl:
            loss, logits = causal_lm_loss_slot(
                hidden_states,
                self.lm_head.weight,
                labels,
                vocab_size=self.config.text_config.vocab_size,
                final_logit_softcapping=self.final_logit_softcapping,
                **kwargs,
            )
        else:
            logits = self.lm_head(hidden_states)

            # Logits softcapping
            logits = logits / self.final_logit_softcapping
            logits = torch.tanh(logits)
            logits = logits * self.final_logit_softcapping

            loss = None
            if labels is not None:
                loss = self.loss_function(
                    logits=logits, labels=labels, vocab_size=self.config.text_config.vocab_size, **kwargs
                )

        return MistralLarge4CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            router_logits=outputs.router_logits,
            image_outputs=outputs.image_outputs,
        )

    # [ADDED METHOD] MistralLarge4ForConditionalGeneration.get_parallel_plan: expert-parallel plan of the fused expert tensors
    def get_parallel_plan(self):
        """Expert-parallel plan of MistralLarge4ForCausalLM: parameter-name pattern -> placement.

        ``*`` matches one dotted component of a ``state_dict`` key; ``"shard(0)"`` splits the fused expert
        tensors (``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``) by expert across the expert-parallel
        group. Every parameter no pattern names is replicated.
        """
        return {
            "model.language_model.layers.*.mlp.experts.gate_up_proj": "shard(0)",
            "model.language_model.layers.*.mlp.experts.down_proj": "shard(0)",
        }


__all__ = [
    "MistralLarge4PreTrainedModel",
    "MistralLarge4TextModel",
    "MistralLarge4Model",
    "MistralLarge4ForConditionalGeneration",
]
