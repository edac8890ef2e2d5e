"""Glm4v (VLM), GPU backend: op-slot guards read from upstream's structure.

Left as upstream's code (no snippet covers them):

- rope: apply_rotary_pos_emb (line 500): apply_rotary_pos_emb (line 500) is not a known body: partial rotary (a
  pass-through slice); replace it by hand to guard it (replace_function)

The vision tower Glm4vVisionModel gets dummy_forward and its rotary function behind rope_vision; Glm4vModel gets the
position-id function and the sequence-parallel forward.
Left as upstream's on purpose: torch's own layers and transformers' activation modules (the scaffold's module-tree
test holds every other module of a built model to this module's classes).
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import CallSites, LossHead, Mlp, Norm, VisionTower, vlm

config = PatchConfig(
    source_module="transformers.models.glm4v.modeling_glm4v",
    target_file="patched_modeling_glm4v_gpu.py",
    description="Glm4v with op-slot guards and slot-backed losses",
)
vlm(
    config,
    prefix="Glm4v",
    vision=VisionTower("Glm4vVisionModel"),
    norms=[Norm("Glm4vRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp(
            "Glm4VisionMlp",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.activation_name",
            init_activation="hidden_act",
        ),
        Mlp(
            "Glm4vTextMLP",
            kind="fused_gate_up",
            gate="gate_up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
        ),
    ],
    call_sites=[CallSites("Glm4vVisionPatchMerger", layer_norms=("post_projection_norm",))],
    rope=None,
    causal_lm=LossHead("Glm4vForConditionalGeneration", softcap="", scale=()),
    mrope=None,
)
