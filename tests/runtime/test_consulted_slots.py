"""Which op slots a built model consults is read from the code of the classes it holds, not from what their modules
import: a slot a module imports only for classes the model does not build is never called, and binding a kernel
to it must be refused as a kernel that would never run."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, Qwen3_5TextConfig, Qwen3MoeConfig

from modelgraft.models.loader import get_model_class
from modelgraft.models.ops.binding import consulted_slots
from modelgraft.models.testing import tiny_config
from modelgraft.models.testing.reference import DECODE_SLOTS, training_step_slots

MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 12}
#: A Gated DeltaNet layer and an attention layer.
HYBRID = {"num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]}


def _built(model_type: str, architecture: str, config: object) -> torch.nn.Module:
    with torch.device("meta"):
        return get_model_class(model_type, architecture)(config)


def test_a_helper_the_kernel_hub_wraps_in_a_module_is_followed_to_its_slot() -> None:
    """transformers' kernel hub replaces ``apply_rotary_pos_emb`` with a module around it; its RoPE guard counts."""
    model = _built("llama", "LlamaForCausalLM", tiny_config(LlamaConfig))
    assert "rope" in consulted_slots(model)


def test_a_text_model_does_not_consult_the_vision_slots_its_module_guards() -> None:
    """Qwen3.5's text model alone, as a composed VLM builds it, never runs that module's vision RoPE."""
    model = _built("qwen3_5_text", "Qwen3_5TextModel", tiny_config(Qwen3_5TextConfig, **HYBRID))
    consulted = consulted_slots(model)
    assert {"rope", "chunk_gated_delta_rule", "causal_conv1d"} <= consulted
    assert "rope_vision" not in consulted


def test_a_moe_model_without_dense_layers_does_not_consult_the_dense_mlp_slot() -> None:
    model = _built("qwen3_moe", "Qwen3MoeForCausalLM", tiny_config(Qwen3MoeConfig, **MOE))
    assert "glu_activation" not in consulted_slots(model)


def test_a_moe_model_with_a_dense_layer_consults_the_dense_mlp_slot() -> None:
    config = tiny_config(Qwen3MoeConfig, mlp_only_layers=[0], **MOE)
    assert "glu_activation" in consulted_slots(_built("qwen3_moe", "Qwen3MoeForCausalLM", config))


def test_a_training_step_calls_no_decode_only_slot() -> None:
    model = _built("qwen3_5_text", "Qwen3_5TextModel", tiny_config(Qwen3_5TextConfig, **HYBRID))
    assert set(DECODE_SLOTS) <= consulted_slots(model)
    assert not set(DECODE_SLOTS) & training_step_slots(model)
    assert "chunk_gated_delta_rule" in training_step_slots(model)
