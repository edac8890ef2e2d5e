"""The MoE text-model recipe: the dense slot guards plus routed experts, the aux loss and the expert plan.

A MoE config is then one PatchConfig plus one :func:`moe_text` call. What a MoE model of transformers
5.16 already has upstream is kept as it is: the experts are fused (``gate_up_proj [E, 2I, H]``,
``down_proj [E, H, I]``), the router returns ``(router_logits, scores, indices)`` and
``_can_record_outputs`` records its logits for ``output_router_logits``. The recipe adds:

- the dense pieces, same snippets as :func:`generator.recipes.dense_text`: RMSNorm, the gated MLP of
  the dense layers (``mlp_only_layers`` / ``decoder_sparse_step``), RoPE, the classification head;
- ``moe_sparse_block_forward``: the routed experts behind ``moe_experts_slot``;
- ``moe_causal_lm_forward``: the fused-loss head plus the aux loss behind ``load_balancing_loss_slot``,
  returning the MoE output dataclass with ``aux_loss`` and ``router_logits``;
- ``moe_parallel_plan``: an added ``get_parallel_plan`` sharding the fused expert tensors by expert.
"""

from __future__ import annotations

from collections.abc import Sequence

from generator.dsl.config import PatchConfig
from generator.recipes.dense import apply_gated_mlp, apply_norms, apply_rope, apply_sequence_classification


def moe_text(
    config: PatchConfig,
    *,
    prefix: str,
    rms_norm: str = "weight",
    extra_norms: Sequence[str] = (),
    activation_attr: str = "hidden_act",
    experts_activation: str = "self.experts.config.hidden_act",
    vocab_size: str = "self.vocab_size",
    num_experts: str = "self.num_experts",
    top_k: str = "self.num_experts_per_tok",
    aux_loss_coef: str = "self.router_aux_loss_coef",
    output_router_logits_default: str = "self.config.output_router_logits",
    layers: str = "model.layers",
    causal_lm: str | None = None,
    output_class: str = "MoeCausalLMOutputWithPast",
    sparse_block: str | None = None,
    dense_mlp: str | None = None,
    sequence_classification: str | None = None,
) -> PatchConfig:
    """Apply the MoE snippets to ``config`` for the model whose classes start with ``prefix``.

    Class names default to ``<prefix>RMSNorm``, ``<prefix>MLP`` (``dense_mlp``),
    ``<prefix>SparseMoeBlock`` (``sparse_block``), ``<prefix>ForCausalLM`` (``causal_lm``) and
    ``<prefix>ForSequenceClassification`` (``sequence_classification``). The string arguments are
    Python expressions evaluated in the patched method (see each snippet's header); ``layers`` is the
    state_dict prefix of the decoder layers used by the parallel plan.
    """
    causal_lm = causal_lm or f"{prefix}ForCausalLM"
    apply_norms(config, prefix=prefix, rms_norm=rms_norm, extra_norms=extra_norms)
    apply_gated_mlp(
        config,
        mlp=dense_mlp or f"{prefix}MLP",
        activation_attr=activation_attr,
        residual_dropout=False,
        description="glu_activation slot guard (dense layers)",
    )
    apply_rope(config)
    config.apply_snippet(
        "moe_sparse_block_forward",
        f"{sparse_block or prefix + 'SparseMoeBlock'}.forward",
        activation=experts_activation,
        description="routed experts behind the moe_experts slot",
    )
    config.apply_snippet(
        "moe_causal_lm_forward",
        f"{causal_lm}.forward",
        output_class=output_class,
        vocab_size=vocab_size,
        num_experts=num_experts,
        top_k=top_k,
        aux_loss_coef=aux_loss_coef,
        output_router_logits_default=output_router_logits_default,
        description="logits_to_keep slicing before the causal_lm_loss slot; aux loss behind the load_balancing_loss slot",
    )
    config.apply_snippet(
        "moe_parallel_plan",
        f"{causal_lm}.get_parallel_plan",
        add=True,
        prefix=prefix,
        layers=layers,
        description="expert-parallel plan of the fused expert tensors",
    )
    apply_sequence_classification(config, head=sequence_classification or f"{prefix}ForSequenceClassification")
    return config
