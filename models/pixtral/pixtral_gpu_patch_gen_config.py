"""Pixtral (vision encoder), GPU backend: the vision_encoder recipe's guards on ``PixtralVisionModel``'s path.

What a composed VLM's ``AutoModel.from_config(vision_config)`` builds for ``pixtral`` (registered in
``__init__.py``) runs through these guards. Unlike SigLIP and CLIP, Pixtral's tower is built like a Mistral decoder
layer stack without the causal mask, so the guards are the dense ones:

- ``PixtralRMSNorm`` behind the ``rms_norm`` slot (llama's formulation, ``rms_weight``: normalize in fp32, cast
  back, then scale): ``ln_pre`` after the patch convolution and the ``attention_norm`` and ``ffn_norm`` of each
  ``PixtralAttentionLayer``. Their epsilon is upstream's hard-coded ``1e-5``, handed to the kernel from the
  module's ``variance_epsilon``;
- ``PixtralMLP``'s gated activation (``down(act(gate(x)) * up(x))``, ``config.hidden_act``) behind the
  ``glu_activation`` slot;
- ``apply_rotary_pos_emb`` behind the ``rope`` slot (``rotate_half``). Pixtral's RoPE is 2-D only in how
  ``PixtralVisionRotaryEmbedding`` builds cos and sin (each patch's row and column angles, concatenated); the
  function that applies them is llama's rotate-half, which the rope slot's contract computes as it is. The
  attention calls it with ``unsqueeze_dim=0`` (cos and sin are ``[patches, head_dim]`` for the whole packed
  sequence), which the guard hands to the slot; a kernel that only takes llama's ``unsqueeze_dim=1`` (liger's)
  refuses it by name, and the eager kernel serves it.

Left as upstream's on purpose: the rotary embedding module that builds cos and sin from the 2-D patch positions
(no slot computes it), the attention (``PixtralAttention`` dispatches through the registered attention
implementations; flash attention gets the packed images' boundaries as upstream passes them), the patch
convolution, the block-diagonal attention mask between images of different sizes, and the output dataclass.
``PixtralVisionModel`` returns no ``pooler_output``: a VLM takes the per-patch ``last_hidden_state``.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import Mlp, Norm, Rope, vision_encoder

config = PatchConfig(
    source_module="transformers.models.pixtral.modeling_pixtral",
    target_file="patched_modeling_pixtral_gpu.py",
    description="Pixtral vision encoder with op-slot guards (RMSNorm, gated MLP activation, RoPE)",
)
vision_encoder(
    config,
    prefix="Pixtral",
    norms=[Norm("PixtralRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp(
            "PixtralMLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
        )
    ],
    rope=Rope("apply_rotary_pos_emb", formulation="rotate_half"),
)
