# ====================================================================================================
# GENERATED FILE - DO NOT EDIT BY HAND.
# Regenerate with: patchgen models.glmasr.glmasr_gpu_patch_gen_config
# Source: transformers.models.glmasr.modeling_glmasr (transformers==5.25.0)
# Config: models.glmasr.glmasr_gpu_patch_gen_config
# Description: GLM-ASR with op-slot guards and slot-backed losses
# Fingerprint: 88c383791e4d2f9db387
# Patches:
#   - modify_init GlmAsrMLP: record the activation's name for the slot guard
#   - override_method GlmAsrMLP.forward: activation slot guard
#   - override_method GlmAsrEncoderLayer.forward: layer_norm and activation slot guards at the module calls
#   - modify_init GlmAsrMultiModalProjector: record the activation's name for the slot guard
#   - override_method GlmAsrMultiModalProjector.forward: layer_norm and activation slot guards at the module calls
#   - replace_function apply_rotary_pos_emb: rope slot guard
#   - override_method GlmAsrModel.__init__: the towers are generated classes, chosen by the sub-configs' model_type
#   - override_method GlmAsrModel.dummy_forward: a zero loss term through the audio tower and the projector, for ranks without audio
#   - override_method GlmAsrModel.forward: sequence-parallel aware: this rank's placeholder features, dummy towers, dict masks
#   - override_method GlmAsrForConditionalGeneration.forward: logits and loss behind the causal_lm_loss slot
#   - override_method GlmAsrPreTrainedModel.is_custom_code: upstream's checkpoint conversions apply, both ways
#   - override_method GlmAsrPreTrainedModel.from_pretrained: strict loading by default; strict=False is upstream's
#   - override_method GlmAsrPreTrainedModel.get_correct_attn_implementation: fused_attention registered when a model asks for it
# ====================================================================================================
# Copyright 2025 the HuggingFace Team. All rights reserved.
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

from transformers.activations import ACT2FN
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.masking_utils import find_packed_sequence_indices
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    BaseModelOutputWithPooling,
    CausalLMOutputWithPast,
    ModelOutput,
)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel, slice_logits_to_keep
from transformers.models.glmasr.configuration_glmasr import GlmAsrConfig, GlmAsrEncoderConfig
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, auto_docstring, is_torch_available, torch_compilable_check
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from modelgraft.models.attention import FUSED_ATTENTION, register_fused_attention
from modelgraft.models.composition import build_sub_model
from modelgraft.models.ops.slots import (
    activation_slot,
    causal_lm_loss_slot,
    layer_norm_slot,
    placeholder_features_slot,
    rope_slot,
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


if is_torch_available():
    import torch
    from torch import nn


class GlmAsrRotaryEmbedding(nn.Module):
    def __init__(self, config: GlmAsrConfig):
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

    @staticmethod
    def compute_default_rope_parameters(config: GlmAsrConfig, device=None, **kwargs) -> tuple[torch.Tensor, float]:
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
        partial_rotary_factor = config.rope_parameters.get("partial_rotary_factor", 1.0)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        dim = int(head_dim * partial_rotary_factor)

        attention_factor = 1.0  # Unused in this type of RoPE
        # Compute the inverse frequencies
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        return inv_freq.to(device), attention_factor

    @dynamic_rope_update  # power user: used with advanced RoPE types (e.g. dynamic rope)
    def forward(self, x, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling

        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


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


# [PATCHED FUNCTION] apply_rotary_pos_emb: rope slot guard
def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    if rope_slot.use_non_eager_impl:
        return rope_slot(q, k, cos, sin, unsqueeze_dim)
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)

    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]

    # Apply rotary embeddings on the first half or full tensor
    q_embed = (q_rot * cos) + (rotate_half(q_rot) * sin)
    k_embed = (k_rot * cos) + (rotate_half(k_rot) * sin)

    # Concatenate back to full shape
    q_embed = torch.cat([q_embed, q_pass], dim=-1)
    k_embed = torch.cat([k_embed, k_pass], dim=-1)
    return q_embed, k_embed


class GlmAsrAttention(nn.Module):
    """Multi-headed attention from 'Attention Is All You Need' paper"""

    def __init__(self, config: GlmAsrConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = False
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=True)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )

        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask=attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )

        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


# [MODIFIED CLASS] GlmAsrMLP
class GlmAsrMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act_fn = ACT2FN[config.hidden_act]
        # [MODIFIED INIT] GlmAsrMLP: record the activation's name for the slot guard
        self.activation_name = config.hidden_act

    # [PATCHED METHOD] GlmAsrMLP.forward: activation slot guard
    def forward(self, hidden_states: torch.Tensor):
        hidden_states = self.fc1(hidden_states)
        if activation_slot.use_non_eager_impl:
            hidden_states = activation_slot(hidden_states, self.activation_name)
        else:
            hidden_states = self.act_fn(hidden_states)
        hidden_states = self.fc2(hidden_states)
        return hidden_states


# [MODIFIED CLASS] GlmAsrEncoderLayer
class GlmAsrEncoderLayer(GradientCheckpointingLayer):
    def __init__(self, config: GlmAsrConfig, layer_idx: int):
        super().__init__()
        self.hidden_size = config.hidden_size

        self.self_attn = GlmAsrAttention(config=config, layer_idx=layer_idx)

        self.mlp = GlmAsrMLP(config)
        self.input_layernorm = nn.LayerNorm(config.hidden_size)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size)

    # [PATCHED METHOD] GlmAsrEncoderLayer.forward: layer_norm and activation slot guards at the module calls
    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        residual = hidden_states
        if layer_norm_slot.use_non_eager_impl:
            hidden_states = layer_norm_slot(
                hidden_states,
                self.input_layernorm.normalized_shape,
                self.input_layernorm.weight,
                self.input_layernorm.bias,
                self.input_layernorm.eps,
            )
        else:
            hidden_states = self.input_layernorm(hidden_states)
        # Self Attention
        hidden_states, _ = self.self_attn(
            hidden_states=hidden_states,
            position_embeddings=position_embeddings,
            **kwargs,
        )
        hidden_states = residual + hidden_states

        # Fully Connected
        residual = hidden_states
        if layer_norm_slot.use_non_eager_impl:
            hidden_states = layer_norm_slot(
                hidden_states,
                self.post_attention_layernorm.normalized_shape,
                self.post_attention_layernorm.weight,
                self.post_attention_layernorm.bias,
                self.post_attention_layernorm.eps,
            )
        else:
            hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


# [MODIFIED CLASS] GlmAsrPreTrainedModel
@auto_docstring
class GlmAsrPreTrainedModel(PreTrainedModel):
    config: GlmAsrConfig
    base_model_prefix = "model"
    input_modalities = ("audio", "text")
    supports_gradient_checkpointing = True
    _no_split_modules = ["GlmAsrAttention"]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_attention_backend = True

    # [PATCHED METHOD] GlmAsrPreTrainedModel.is_custom_code: upstream's checkpoint conversions apply, both ways
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

    # [PATCHED METHOD] GlmAsrPreTrainedModel.from_pretrained: strict loading by default; strict=False is upstream's
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

    # [PATCHED METHOD] GlmAsrPreTrainedModel.get_correct_attn_implementation: fused_attention registered when a model asks for it
    def get_correct_attn_implementation(self, requested_attention, is_init_check=False):
        """PreTrainedModel's check of the requested attention, which also accepts ``"fused_attention"``.

        ``"fused_attention"`` (``modelgraft.models.attention``: torch's fused CPU kernel for MLA's head widths,
        sinks and DSA indices) is registered with transformers when a model asks for it, never on import
        (docs/design.md, "Attention implementations on request").
        """
        if requested_attention == FUSED_ATTENTION:
            register_fused_attention()
        return super().get_correct_attn_implementation(requested_attention, is_init_check)


# TODO: @eustlb, this is what WhisperEncoder should look like
class GlmAsrEncoder(GlmAsrPreTrainedModel):
    config: GlmAsrEncoderConfig
    main_input_name = "input_features"
    input_modalities = "audio"
    _no_split_modules = ["GlmAsrEncoderLayer"]
    _can_record_outputs = {
        "hidden_states": GlmAsrEncoderLayer,
        "attentions": GlmAsrAttention,
    }

    def __init__(self, config: GlmAsrEncoderConfig):
        super().__init__(config)
        self.conv1 = nn.Conv1d(config.num_mel_bins, config.hidden_size, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(config.hidden_size, config.hidden_size, kernel_size=3, stride=2, padding=1)

        self.layers = nn.ModuleList(
            [GlmAsrEncoderLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
        )
        self.norm = nn.LayerNorm(config.hidden_size)
        self.rotary_emb = GlmAsrRotaryEmbedding(config=config)
        self.gradient_checkpointing = False
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    @auto_docstring
    def forward(self, input_features, **kwargs: Unpack[TransformersKwargs]):
        inputs_embeds = nn.functional.gelu(self.conv1(input_features))
        inputs_embeds = nn.functional.gelu(self.conv2(inputs_embeds))
        inputs_embeds = inputs_embeds.transpose(1, 2)

        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(
            hidden_states, position_ids=torch.arange(hidden_states.shape[1], device=hidden_states.device)[None, :]
        )

        for encoder_layer in self.layers:
            hidden_states = encoder_layer(hidden_states, position_embeddings=position_embeddings, **kwargs)

        hidden_states = self.norm(hidden_states)
        return BaseModelOutputWithPooling(last_hidden_state=hidden_states)


# [MODIFIED CLASS] GlmAsrMultiModalProjector
class GlmAsrMultiModalProjector(nn.Module):
    """
    Audio adaptor (small MLP) that projects GlmAsrEncoder features
    to the LLM embedding space so they can replace `<sound>` tokens.
    """

    def __init__(self, config: GlmAsrConfig):
        super().__init__()
        self.linear_1 = nn.Linear(config.audio_config.intermediate_size, config.text_config.hidden_size * 2)
        self.act = ACT2FN[config.projector_hidden_act]
        self.linear_2 = nn.Linear(config.text_config.hidden_size * 2, config.text_config.hidden_size)
        # [MODIFIED INIT] GlmAsrMultiModalProjector: record the activation's name for the slot guard
        self.activation_name = config.projector_hidden_act

    # [PATCHED METHOD] GlmAsrMultiModalProjector.forward: layer_norm and activation slot guards at the module calls
    def forward(self, audio_features):
        hidden_states = self.linear_1(audio_features)
        if activation_slot.use_non_eager_impl:
            hidden_states = activation_slot(hidden_states, self.activation_name)
        else:
            hidden_states = self.act(hidden_states)
        hidden_states = self.linear_2(hidden_states)
        return hidden_states


@dataclass
class GlmAsrModelOutputWithPast(BaseModelOutputWithPast):
    r"""
    audio_hidden_states (`torch.Tensor`, *optional*):
        Projected audio hidden states.
    """

    audio_hidden_states: torch.Tensor | None = None


# [MODIFIED CLASS] GlmAsrModel
@auto_docstring(
    custom_intro="""
    The GlmAsr model which consists of a fine-tuned Whisper encoder, a multi-modal projector and a Llama language model.
    """
)
class GlmAsrModel(GlmAsrPreTrainedModel):
    _tp_plan = None
    _pp_plan = None
    _keep_in_fp32_modules_strict = None

    # [PATCHED METHOD] GlmAsrModel.__init__: the towers are generated classes, chosen by the sub-configs' model_type
    def __init__(self, config: GlmAsrConfig):
        super().__init__(config)
        self.audio_tower = build_sub_model(config.audio_config)
        self.language_model = build_sub_model(config.text_config)
        self.multi_modal_projector = GlmAsrMultiModalProjector(config)
        self.post_init()

    @can_return_tuple
    @auto_docstring(
        custom_intro="Compute audio embeddings from log-mel input features using the audio encoder and multi-modal projector."
    )
    def get_audio_features(
        self,
        input_features: torch.Tensor,
        input_features_mask: torch.Tensor,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple | BaseModelOutputWithPooling:
        r"""
        input_features (`torch.Tensor`):
            Float values of mel features extracted from the raw speech waveform.
        input_features_mask (`torch.Tensor` of shape `(batch_size, feature_sequence_length)`):
            Mask to avoid performing attention on padded feature indices.
        """
        audio_outputs = self.audio_tower(input_features, return_dict=True, **kwargs)
        audio_hidden_states = audio_outputs.last_hidden_state
        audio_hidden_states = audio_hidden_states.reshape(
            input_features.shape[0], -1, self.config.audio_config.intermediate_size
        )
        audio_embeds = self.multi_modal_projector(audio_hidden_states)

        audio_lengths = input_features_mask.sum(-1)
        for padding, kernel_size, stride in [(1, 3, 1), (1, 3, 2)]:
            audio_lengths = (audio_lengths + 2 * padding - (kernel_size - 1) - 1) // stride + 1
        merge_factor = 4
        post_lengths = (audio_lengths - merge_factor) // merge_factor + 1

        valid_mask = torch.arange(audio_embeds.shape[1], device=post_lengths.device)[None, :] < post_lengths[:, None]
        audio_outputs.pooler_output = audio_embeds[valid_mask.to(audio_embeds.device)]

        return audio_outputs

    def get_placeholder_mask(
        self, input_ids: torch.LongTensor, inputs_embeds: torch.Tensor, audio_features: torch.Tensor
    ):
        """
        Obtains multimodal placeholder mask from `input_ids` or `inputs_embeds`, and checks that the placeholder token count is
        equal to the length of multimodal features. If the lengths are different, an error is raised.
        """
        if input_ids is None:
            special_audio_mask = inputs_embeds == self.get_input_embeddings()(
                torch.full((), self.config.audio_token_id, dtype=torch.long, device=inputs_embeds.device)
            )
            special_audio_mask = special_audio_mask.all(-1)
        else:
            special_audio_mask = input_ids == self.config.audio_token_id

        n_audio_tokens = special_audio_mask.sum()
        n_audio_features = audio_features.shape[0]
        special_audio_mask = special_audio_mask.unsqueeze(-1).expand_as(inputs_embeds).to(inputs_embeds.device)
        torch_compilable_check(
            inputs_embeds[special_audio_mask].numel() == audio_features.numel(),
            f"Audio features and audio tokens do not match, tokens: {n_audio_tokens}, features: {n_audio_features}",
        )
        return special_audio_mask

    # [PATCHED METHOD] GlmAsrModel.forward: sequence-parallel aware: this rank's placeholder features, dummy towers, dict masks
    @can_return_tuple
    @auto_docstring
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        input_features: torch.Tensor | None = None,
        input_features_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple | GlmAsrModelOutputWithPast:
        r"""
        input_features_mask (`torch.Tensor` of shape `(batch_size, feature_sequence_length)`):
            Mask to avoid performing attention on padding feature indices.
        """
        if packs_text_documents(position_ids, attention_mask, cache):
            use_cache = False
        if inputs_embeds is None:
            inputs_embeds = self.get_input_embeddings()(input_ids)

        audio_embeds = None
        if input_features is not None and input_ids is not None:
            if placeholder_features_slot.use_non_eager_impl:
                audio_embeds = placeholder_outputs(
                    self.get_audio_features(input_features, input_features_mask, return_dict=True),
                    (input_ids == self.config.audio_token_id),
                    "pooler_output",
                ).pooler_output
            else:
                audio_embeds = self.get_audio_features(
                    input_features, input_features_mask, return_dict=True
                ).pooler_output

            # replace text-audio token placeholders with audio embeddings
            special_audio_mask = self.get_placeholder_mask(
                input_ids, inputs_embeds=inputs_embeds, audio_features=audio_embeds
            )
            inputs_embeds = inputs_embeds.masked_scatter(
                special_audio_mask, audio_embeds.to(inputs_embeds.device, inputs_embeds.dtype)
            )

        if placeholder_features_slot.use_non_eager_impl:
            outputs = self.language_model(
                inputs_embeds=with_tower_dummies(inputs_embeds, self if input_features is None else None),
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                use_cache=use_cache,
                **kwargs,
            )
        else:
            outputs = self.language_model(
                inputs_embeds=inputs_embeds,
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                use_cache=use_cache,
                **kwargs,
            )

        return GlmAsrModelOutputWithPast(
            last_hidden_state=outputs.last_hidden_state,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            audio_hidden_states=audio_embeds,
        )

    # [ADDED METHOD] GlmAsrModel.dummy_forward: a zero loss term through the audio tower and the projector, for ranks without audio
    def dummy_forward(self):
        """A zero loss term that runs the audio tower and the projector on one blank clip.

        Add it to the loss of a batch without audio: the value is exactly zero (the audio features, times 0.0,
        summed), so the loss is unchanged, and every parameter the audio path uses gets a gradient (zero) instead
        of None.
        """
        audio_config = self.config.audio_config
        weight = next(self.audio_tower.parameters())
        if getattr(audio_config, "max_source_positions", None):
            frames = 2 * audio_config.max_source_positions
        elif getattr(audio_config, "n_window", None):
            frames = 2 * audio_config.n_window
        else:
            frames = 2 * audio_config.max_position_embeddings
        input_features = torch.zeros(1, audio_config.num_mel_bins, frames, dtype=weight.dtype, device=weight.device)
        input_features_mask = torch.ones(1, frames, dtype=torch.long, device=weight.device)
        outputs = self.get_audio_features(input_features, input_features_mask, return_dict=True)
        features = outputs.pooler_output
        total = torch.zeros((), dtype=torch.float32, device=weight.device)
        for tensor in features if isinstance(features, (list, tuple)) else (features,):
            total = total + (tensor.float() * 0.0).sum()
        return total


@auto_docstring(
    custom_intro="""
    Base class for GlmAsr causal language model (or autoregressive) outputs.
    """
)
@dataclass
class GlmAsrCausalLMOutputWithPast(ModelOutput):
    r"""
    loss (`torch.Tensor` of shape `(1,)`, *optional*, returned when `labels` is provided):
        Language modeling loss (for next-token prediction).
    logits (`torch.Tensor` of shape `(batch_size, sequence_length, config.vocab_size)`):
        Prediction scores of the language modeling head.
    cache (`Cache`, *optional*, returned when `use_cache=True` is passed or when `config.use_cache=True`):
        It is a [`~cache_utils.Cache`] instance.
    audio_hidden_states (`torch.Tensor`, *optional*):
        Hidden states of the audio encoder after projection.
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    cache: Cache | None = None
    hidden_states: tuple[torch.Tensor] | None = None
    attentions: tuple[torch.Tensor] | None = None
    audio_hidden_states: torch.Tensor | None = None


# [MODIFIED CLASS] GlmAsrForConditionalGeneration
@auto_docstring(
    custom_intro="""
    The GlmAsr model which consists of a fine-tuned Whisper encoder, a multi-modal projector and a Llama language model.
    """
)
class GlmAsrForConditionalGeneration(GlmAsrPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.language_model.embed_tokens.weight"}
    _tp_plan = {"lm_head": "colwise_gather_output"}

    def __init__(self, config: GlmAsrConfig):
        super().__init__(config)
        self.model = GlmAsrModel(config)
        self.lm_head = nn.Linear(config.text_config.hidden_size, config.text_config.vocab_size, bias=False)
        self.post_init()

    def get_audio_features(self, input_features, input_features_mask, **kwargs):
        return self.model.get_audio_features(input_features, input_features_mask, **kwargs)

    # [PATCHED METHOD] GlmAsrForConditionalGeneration.forward: logits and loss behind the causal_lm_loss slot
    @can_return_tuple
    @auto_docstring
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        input_features: torch.Tensor | None = None,
        input_features_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithPast:
        r"""
        input_features_mask (`torch.Tensor` of shape `(batch_size, feature_sequence_length)`):
            Mask to avoid performing attention on padding feature indices. Mask values selected in `[0, 1]`:

            - 1 for tokens that are **not masked**,
            - 0 for tokens that are **masked**.

        Example:

        ```python
        >>> from transformers import GlmAsrForConditionalGeneration, AutoProcessor

        >>> model_id = "zai-org/GLM-ASR-Nano-2512"
        >>> processor = AutoProcessor.from_pretrained(model_id)
        >>> model = GlmAsrForConditionalGeneration.from_pretrained(model_id, dtype="auto", device_map="auto")
        >>> inputs = processor.apply_transcription_request("https://huggingface.co/datasets/hf-internal-testing/dummy-audio-samples/resolve/main/bcn_weather.mp3")

        >>> inputs = inputs.to(model.device, dtype=model.dtype)

        >>> outputs = model.generate(**inputs, do_sample=False, max_new_tokens=500)

        >>> decoded_outputs = processor.batch_decode(outputs[:, inputs.input_ids.shape[1] :], skip_special_tokens=True)
        >>> print(decoded_outputs)
        ```"""
        outputs = self.model(
            input_ids=input_ids,
            input_features=input_features,
            input_features_mask=input_features_mask,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )

        hidden_states = outputs.last_hidden_state
        hidden_states = slice_logits_to_keep(hidden_states, logits_to_keep)
        if labels is not None and causal_lm_loss_slot.use_non_eager_impl:
            loss, logits = causal_lm_loss_slot(
                hidden_states, self.lm_head.weight, labels, vocab_size=self.config.text_config.vocab_size, **kwargs
            )
        else:
            logits = self.lm_head(hidden_states)

            loss = None
            if labels is not None:
                loss = self.loss_function(
                    logits=logits, labels=labels, vocab_size=self.config.text_config.vocab_size, **kwargs
                )

        return GlmAsrCausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            audio_hidden_states=outputs.audio_hidden_states,
        )


__all__ = ["GlmAsrEncoder", "GlmAsrForConditionalGeneration", "GlmAsrModel", "GlmAsrPreTrainedModel"]
