"""DeepSeek-V4 (MoE text), GPU backend: written by hand, the scaffold refuses the model as out of category.

``patchgen-inspect deepseek_v4`` files V4 under ``out_of_category`` because it defines its own cache
layers (the compressors' rolling windows), so this config is the hand-written path of
docs/adding-a-model.md. The ``moe_text`` recipe guards what V4 shares with the other MoE models; V4's
own structures get snippets of their own. Every guard keeps upstream's statements as the eager path.

Guarded (slot):
- ``DeepseekV4RMSNorm`` (rms_norm, scaled in fp32, then cast) and ``DeepseekV4UnweightedRMSNorm`` (rms_norm,
  unweighted);
- the routed experts of ``DeepseekV4SparseMoeBlock`` (moe_experts, with the clamp of V4's SwiGLU as the
  slot's ``limit``), their activation's name recorded by ``activation_name_init`` because
  ``DeepseekV4Experts`` keeps no config;
- the causal LM's logits and loss (causal_lm_loss) and its aux loss (load_balancing_loss);
- the two routers: ``DeepseekV4HashRouter`` (hash_router: experts from the frozen ``tid2eid[input_ids]``
  table) and ``DeepseekV4TopKRouter`` (correction_bias_router: top-k of the scores plus the correction
  bias, no expert groups), their scoring function's name recorded by ``activation_name_init``;
- manifold-constrained hyper-connections (mHC): ``DeepseekV4HyperConnection.forward`` (hyper_connection:
  the pre/post weights and comb logits) and its Sinkhorn step (sinkhorn),
  the decoder layer's two placements of a sublayer output back into the streams
  (hyper_connection_post), and ``DeepseekV4HyperHead.forward`` (hyper_head, the final collapse);
- the lightning indexer's scoring head, ``DeepseekV4IndexerScorer.forward`` (lightning_indexer).

Left as upstream's code, with the reason:
- RoPE: V4's ``apply_rotary_pos_emb`` rotates one tensor's *trailing* channels with half-sized cos/sin
  repeated pairwise (and the attention applies it again with ``-sin`` to the output); the rope slot's
  contract rotates a (q, k) pair's leading channels, so no formulation fits.
- The shared experts (``DeepseekV4MLP``): a SwiGLU whose gate and up are clamped in statements of their
  own, which the glu_activation guard (``ACT(gate) * up``) does not cover.
- The CSA/HCA compressors and the indexer's own compressor: their work is projections (``nn.Linear``) and
  a softmax pooling over windows interleaved with the state of V4's cache layers (buffered tokens,
  overlap slices, entry counts); a kernel slot would have to take over that cache protocol, so the
  compressors stay upstream's, and the indexer's scoring, the one hot computation, is the slot.
- The attention (attention sinks, grouped output projection): the attention interface already picks
  the implementation.
- No sequence classification head exists upstream.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import Experts, LossHead, Norm, moe_text

config = PatchConfig(
    source_module="transformers.models.deepseek_v4.modeling_deepseek_v4",
    target_file="patched_modeling_deepseek_v4_gpu.py",
    description="DeepSeek-V4 with op-slot guards (norms, experts, routers, mHC, indexer) and slot-backed losses",
)
moe_text(
    config,
    prefix="DeepseekV4",
    norms=[
        Norm("DeepseekV4RMSNorm", formulation="rms_weight_cast_last", eps="variance_epsilon", weight="weight"),
        Norm(
            "DeepseekV4UnweightedRMSNorm", formulation="rms_unweighted_cast_scale", eps="variance_epsilon", weight=""
        ),
    ],
    mlps=[],
    rope=None,
    causal_lm=LossHead("DeepseekV4ForCausalLM", softcap="", scale=()),
    experts=Experts("DeepseekV4SparseMoeBlock", activation="self.experts.activation_name", limit="self.experts.limit"),
    aux_loss="load_balancing_loss_func",
    sequence_classification=None,
)
config.apply_snippet(
    "activation_name_init",
    "DeepseekV4Experts",
    kind="modify_init",
    config_attr="hidden_act",
    description="record the experts' activation name for the moe_experts guard",
)
for router, selection in (("DeepseekV4HashRouter", "hash"), ("DeepseekV4TopKRouter", "correction_bias")):
    config.apply_snippet(
        "activation_name_init",
        router,
        kind="modify_init",
        config_attr="scoring_func",
        description="record the router's scoring function name for its slot guard",
    )
    config.apply_snippet(
        "score_router_guard",
        f"{router}.forward",
        selection=selection,
        description=f"routing behind the {selection}_router slot",
    )
config.apply_snippet(
    "hyper_connection_guard",
    "DeepseekV4HyperConnection.forward",
    description="mHC mapping behind the hyper_connection slot, its Sinkhorn step behind the sinkhorn slot",
)
config.apply_snippet(
    "hyper_connection_post_guard",
    "DeepseekV4DecoderLayer.forward",
    outputs=["attn_output", "mlp_output"],
    streams="hidden_states",
    description="mHC placement of each sublayer output behind the hyper_connection_post slot",
)
config.apply_snippet(
    "hyper_head_guard",
    "DeepseekV4HyperHead.forward",
    description="final mHC collapse behind the hyper_head slot",
)
config.apply_snippet(
    "lightning_indexer_guard",
    "DeepseekV4IndexerScorer.forward",
    description="indexer scores behind the lightning_indexer slot",
)
