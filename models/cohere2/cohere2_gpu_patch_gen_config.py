"""Cohere2 (dense text), GPU backend: op-slot guards read from upstream's structure.

Left as upstream's code (no snippet covers them):

- norm: Cohere2LayerNorm (line 88): forward (line 95) matches no known norm formulation; override its forward by
  hand to guard it (override_method)
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import LossHead, Mlp, Rope, dense_text

config = PatchConfig(
    source_module="transformers.models.cohere2.modeling_cohere2",
    target_file="patched_modeling_cohere2_gpu.py",
    description="Cohere2 with op-slot guards and slot-backed losses",
)
dense_text(
    config,
    prefix="Cohere2",
    norms=[],
    mlps=[
        Mlp(
            "Cohere2MLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
        )
    ],
    rope=Rope("apply_rotary_pos_emb", formulation="interleaved_pairs_upcast"),
    causal_lm=LossHead("Cohere2ForCausalLM", softcap="", scale=("mul", "self.logit_scale")),
    sequence_classification=None,
)
