"""CLIP (vision encoder), GPU backend: the vision_encoder recipe's guards on ``CLIPVisionModel``'s path.

What a LLaVA-style VLM's ``AutoModel.from_config(vision_config)`` builds for ``clip_vision_model`` (registered in
``__init__.py``) runs through these guards:

- every ``nn.LayerNorm`` call the vision model makes behind the ``layer_norm`` slot: ``layer_norm1`` and
  ``layer_norm2`` of each ``CLIPEncoderLayer``, and ``CLIPVisionModel``'s ``pre_layrnorm`` (upstream's spelling)
  and ``post_layernorm`` (on the pooled class token);
- ``CLIPMLP``'s activation (``config.hidden_act``, ``quick_gelu`` by default) behind the ``activation`` slot.

Left as upstream's on purpose: the attention (``CLIPAttention`` dispatches through the registered attention
implementations), the class, patch and position embeddings, and the output dataclasses. The rest of upstream's
module stays in the generated file, unregistered: the text model (its layers are the guarded
``CLIPEncoderLayer``; its ``final_layer_norm`` stays upstream's call), ``CLIPModel``, the projection models
(``CLIPVisionModelWithProjection`` builds the guarded ``CLIPVisionModel``) and ``CLIPForImageClassification``, so
the module keeps upstream's ``_init_weights`` and cross-references unchanged.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, Mlp, vision_encoder

config = PatchConfig(
    source_module="transformers.models.clip.modeling_clip",
    target_file="patched_modeling_clip_gpu.py",
    description="CLIP vision encoder with op-slot guards (LayerNorm calls, MLP activation)",
)
vision_encoder(
    config,
    prefix="CLIP",
    mlps=[Mlp("CLIPMLP", kind="plain", act="activation_fn", activation="self.config.hidden_act")],
    call_sites=[
        CallSites("CLIPEncoderLayer", layer_norms=("layer_norm1", "layer_norm2")),
        CallSites("CLIPVisionModel", layer_norms=("pre_layrnorm", "post_layernorm")),
    ],
)
