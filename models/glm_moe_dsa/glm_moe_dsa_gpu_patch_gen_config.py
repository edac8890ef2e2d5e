"""GLM-MoE-DSA (MoE text), GPU backend: op-slot guards read from upstream's structure.

The scaffold's ``moe_text`` call guards what GLM shares with the other MoE models; the DSA indexer's
selection, GLM's own hot computation, gets its own snippet (added after the copy).

Guarded (slot):
- ``GlmMoeDsaRMSNorm`` (rms_norm, llama's formulation), also the attention's q/kv latent norms;
- ``GlmMoeDsaMLP`` as a whole (gated_mlp): the dense first layers and the shared experts;
- the routed experts of ``GlmMoeDsaMoE`` (moe_experts, fused gate-first layout);
- ``GlmMoeDsaTopkRouter`` (group_limited_router): sigmoid scores, correction bias, group-limited top-k;
- the causal LM's logits and loss (causal_lm_loss); upstream computes no aux loss (DeepSeek-style
  aux-loss-free balancing through the router's correction bias), so there is no load_balancing_loss guard;
- the DSA indexer's scoring, masking and top-k, ``GlmMoeDsaIndexer.forward`` from the scores to its return
  (dsa_indexer); its projections, key norm, RoPE and cache update stay upstream's on both paths.

Left as upstream's code (no snippet covers them):

- rope: apply_rotary_pos_emb_interleave (line 125): no apply_rotary_pos_emb; rotary embedding applied by
  apply_rotary_pos_emb_interleave (line 125); replace it by hand to guard it (replace_function)
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import Experts, LossHead, Mlp, Norm, Router, moe_text

config = PatchConfig(
    source_module="transformers.models.glm_moe_dsa.modeling_glm_moe_dsa",
    target_file="patched_modeling_glm_moe_dsa_gpu.py",
    description="GLM-MoE-DSA with op-slot guards (norms, MLPs, experts, router, DSA indexer) and slot-backed losses",
)
moe_text(
    config,
    prefix="GlmMoeDsa",
    norms=[Norm("GlmMoeDsaRMSNorm", formulation="rms_weight", eps="variance_epsilon", weight="weight")],
    mlps=[
        Mlp(
            "GlmMoeDsaMLP",
            kind="gated",
            gate="gate_proj",
            up="up_proj",
            down="down_proj",
            activation="self.config.hidden_act",
            whole=True,
        )
    ],
    rope=None,
    causal_lm=LossHead("GlmMoeDsaForCausalLM", softcap="", scale=()),
    experts=Experts("GlmMoeDsaMoE", activation="self.experts.config.hidden_act"),
    router=Router("GlmMoeDsaTopkRouter"),
    aux_loss="",
    sequence_classification=None,
)
config.apply_snippet(
    "dsa_indexer_guard",
    "GlmMoeDsaIndexer.forward",
    description="DSA indexer's scores, mask and top-k behind the dsa_indexer slot",
)
