"""SigLIP (vision encoder), GPU backend: the vision_encoder recipe's guards on ``SiglipVisionModel``'s path.

What a LLaVA-style VLM's ``AutoModel.from_config(vision_config)`` builds for ``siglip_vision_model`` (registered in
``__init__.py``) runs through these guards:

- every ``nn.LayerNorm`` call the vision model makes behind the ``layer_norm`` slot: ``layer_norm1`` and
  ``layer_norm2`` of each ``SiglipEncoderLayer``, ``SiglipVisionModel``'s ``post_layernorm`` and the pooling
  head's ``layernorm`` (``SiglipMultiheadAttentionPoolingHead``, built when ``vision_use_head``);
- ``SiglipMLP``'s activation (``config.hidden_act``) behind the ``activation`` slot, in the encoder layers and in
  the pooling head alike.

Left as upstream's on purpose: the attention (``SiglipAttention`` dispatches through the registered attention
implementations), the patch and position embeddings, the pooling head's ``nn.MultiheadAttention`` (torch's own
module) and the output dataclasses. The rest of upstream's module stays in the generated file, unregistered:
the text model (its layers are the guarded ``SiglipEncoderLayer``; its ``final_layer_norm`` stays upstream's
call), the contrastive ``SiglipModel`` and ``SiglipForImageClassification``, so the module keeps upstream's
``_init_weights`` and cross-references unchanged.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, Mlp, vision_encoder

config = PatchConfig(
    source_module="transformers.models.siglip.modeling_siglip",
    target_file="patched_modeling_siglip_gpu.py",
    description="SigLIP vision encoder with op-slot guards (LayerNorm calls, MLP activation)",
)
vision_encoder(
    config,
    prefix="Siglip",
    mlps=[Mlp("SiglipMLP", kind="plain", act="activation_fn", activation="self.config.hidden_act")],
    call_sites=[
        CallSites("SiglipEncoderLayer", layer_norms=("layer_norm1", "layer_norm2")),
        CallSites("SiglipVisionModel", layer_norms=("post_layernorm",)),
        CallSites("SiglipMultiheadAttentionPoolingHead", layer_norms=("layernorm",)),
    ],
)
