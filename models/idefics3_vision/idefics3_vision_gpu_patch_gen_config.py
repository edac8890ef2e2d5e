"""Idefics3 (vision encoder), GPU backend: the vision_encoder recipe's guards on ``Idefics3VisionTransformer``'s path.

What a composed VLM's ``AutoModel.from_config(vision_config)`` builds for ``idefics3_vision`` (registered in
``__init__.py``) runs through these guards. The encoder's layers are SigLIP's, so the guards are SigLIP's:

- every ``nn.LayerNorm`` call of the vision model behind the ``layer_norm`` slot: ``layer_norm1`` and
  ``layer_norm2`` of each ``Idefics3EncoderLayer`` and the transformer's ``post_layernorm``;
- ``Idefics3VisionMLP``'s activation (``config.hidden_act``) behind the ``activation`` slot.

Left as upstream's on purpose: the attention (``Idefics3VisionAttention`` dispatches through the registered
attention implementations), the patch embeddings with their position ids bucketed from each image's unpadded
patches (``patch_attention_mask``), the bidirectional mask, and the output dataclass (no ``pooler_output``). The
rest of upstream's module stays in the generated file, unregistered: the VLM's connector, its unused RMSNorm and
the ``Idefics3Model`` / ``Idefics3ForConditionalGeneration`` classes, so the module keeps upstream's
``_init_weights`` and cross-references unchanged.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, Mlp, vision_encoder

config = PatchConfig(
    source_module="transformers.models.idefics3.modeling_idefics3",
    target_file="patched_modeling_idefics3_gpu.py",
    description="Idefics3 vision encoder with op-slot guards (LayerNorm calls, MLP activation)",
)
vision_encoder(
    config,
    prefix="Idefics3",
    mlps=[Mlp("Idefics3VisionMLP", kind="plain", act="activation_fn", activation="self.config.hidden_act")],
    call_sites=[
        CallSites("Idefics3EncoderLayer", layer_norms=("layer_norm1", "layer_norm2")),
        CallSites("Idefics3VisionTransformer", layer_norms=("post_layernorm",)),
    ],
)
