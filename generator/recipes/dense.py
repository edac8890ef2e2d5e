"""The dense text-model recipe: slot guards for RMSNorm, the gated MLP, RoPE and both loss heads.

A dense config is then one PatchConfig plus one :func:`dense_text` call that
names what differs between models; everything else is the shared snippets.
"""

from __future__ import annotations

from collections.abc import Sequence

from generator.dsl.config import PatchConfig


def dense_text(
    config: PatchConfig,
    *,
    prefix: str,
    rms_norm: str = "weight",
    extra_norms: Sequence[str] = (),
    activation_attr: str = "hidden_act",
    mlp_residual_dropout: bool = False,
    vocab_size: str = "self.config.vocab_size",
    logit_softcapping: bool = False,
    causal_lm: str | None = None,
    output_class: str = "CausalLMOutputWithPast",
    sequence_classification: str | None = None,
) -> PatchConfig:
    """Apply the dense snippets to ``config`` for the model whose classes start with ``prefix``.

    ``rms_norm`` is the norm formulation ("weight", or "one_plus_weight" for
    gemma); ``extra_norms`` names further RMSNorm classes of the same
    formulation; ``vocab_size`` is the expression the loss reads the
    vocabulary from; ``causal_lm`` / ``sequence_classification`` default to
    ``<prefix>ForCausalLM`` / ``<prefix>ForSequenceClassification``.
    """
    for norm in (f"{prefix}RMSNorm", *extra_norms):
        config.apply_snippet(
            "rms_norm_forward", f"{norm}.forward", formulation=rms_norm, description="rms_norm slot guard"
        )
    config.apply_snippet(
        "glu_mlp_forward",
        f"{prefix}MLP.forward",
        activation_attr=activation_attr,
        residual_dropout=mlp_residual_dropout,
        description="glu_activation slot guard",
    )
    config.apply_snippet("apply_rotary_pos_emb", "apply_rotary_pos_emb", description="rope slot guard")
    config.apply_snippet(
        "causal_lm_forward",
        f"{causal_lm or prefix + 'ForCausalLM'}.forward",
        output_class=output_class,
        vocab_size=vocab_size,
        logit_softcapping=logit_softcapping,
        description="logits_to_keep slicing before the causal_lm_loss slot",
    )
    config.apply_snippet(
        "sequence_classification_forward",
        f"{sequence_classification or prefix + 'ForSequenceClassification'}.forward",
        description="sequence_classification_loss slot",
    )
    return config
