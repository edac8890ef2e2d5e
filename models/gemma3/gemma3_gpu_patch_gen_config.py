"""Gemma3 text (dense text), GPU backend: op-slot guards and the fused-loss heads.

Only the text path is kept: model_type "gemma3_text", ``Gemma3ForCausalLM`` and
``Gemma3TextForSequenceClassification`` on ``Gemma3TextConfig``. The multimodal classes are excluded
(and with them the output dataclasses, mask helpers and imports only they used); upstream's
``_init_weights`` names ``Gemma3MultiModalProjector``, so it is patched to drop that branch.
Differences from llama handled by the recipe: the (1 + weight) RMSNorm, ``hidden_activation``, and
final logit softcapping (also passed to a fused loss kernel).
"""

from typing import TYPE_CHECKING

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import LossHead, Mlp, Norm, dense_text

# Names the patch bodies use, for readers and linters only: a patch body runs in the generated module,
# which has its own imports, and configs never import transformers.
if TYPE_CHECKING:
    from transformers import initialization as init
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.gemma3.modeling_gemma3 import (
        Gemma3RotaryEmbedding,
        Gemma3TextScaledWordEmbedding,
    )

config = PatchConfig(
    source_module="transformers.models.gemma3.modeling_gemma3",
    target_file="patched_modeling_gemma3_gpu.py",
    description="Gemma3 text with op-slot guards (RMSNorm, gated MLP, RoPE) and slot-backed losses",
)
dense_text(
    config,
    prefix="Gemma3",
    norms=[Norm(formulation="rms_one_plus_weight", eps="eps")],
    mlps=[Mlp(activation="self.config.hidden_activation")],
    causal_lm=LossHead(softcap="self.config.final_logit_softcapping"),
    sequence_classification="Gemma3TextForSequenceClassification",
    base_model="Gemma3TextModel",
)
config.exclude_from_output(
    "Gemma3Model",
    "Gemma3ForConditionalGeneration",
    "Gemma3ForSequenceClassification",
    "Gemma3MultiModalProjector",
)


@config.override_method(
    "Gemma3PreTrainedModel._init_weights",
    description="no Gemma3MultiModalProjector branch (the multimodal classes are excluded)",
)
def _init_weights(self, module):
    super()._init_weights(module)
    # We initialize with 0s to be 1 centered as the RMSNorm here does (1 + weight)
    if "RMSNorm" in module.__class__.__name__:
        init.zeros_(module.weight)
    elif isinstance(module, Gemma3TextScaledWordEmbedding):
        init.constant_(module.embed_scale, module.scalar_embed_scale)
    elif isinstance(module, Gemma3RotaryEmbedding):
        for layer_type in module.layer_types:
            rope_init_fn = module.compute_default_rope_parameters
            if module.rope_type[layer_type] != "default":
                rope_init_fn = ROPE_INIT_FUNCTIONS[module.rope_type[layer_type]]
            curr_inv_freq, _ = rope_init_fn(module.config, layer_type=layer_type)
            init.copy_(getattr(module, f"{layer_type}_inv_freq"), curr_inv_freq)
            init.copy_(getattr(module, f"{layer_type}_original_inv_freq"), curr_inv_freq)
