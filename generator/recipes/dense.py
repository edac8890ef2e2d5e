"""The dense text-model recipe: slot guards for RMSNorm, the gated MLP, RoPE and both loss heads.

A dense config is then one PatchConfig plus one :func:`dense_text` call that
names what differs between models; everything else is the shared snippets.
"""

from __future__ import annotations

from collections.abc import Sequence

from generator.dsl.config import PatchConfig


def apply_norms(config: PatchConfig, *, prefix: str, rms_norm: str, extra_norms: Sequence[str] = ()) -> None:
    """RMSNorm forward of ``<prefix>RMSNorm`` (and ``extra_norms``) behind the rms_norm slot."""
    for norm in (f"{prefix}RMSNorm", *extra_norms):
        config.apply_snippet(
            "rms_norm_forward", f"{norm}.forward", formulation=rms_norm, description="rms_norm slot guard"
        )


def apply_gated_mlp(
    config: PatchConfig, *, mlp: str, activation_attr: str, residual_dropout: bool, description: str
) -> None:
    """Gated MLP forward of class ``mlp`` behind the glu_activation slot."""
    config.apply_snippet(
        "glu_mlp_forward",
        f"{mlp}.forward",
        activation_attr=activation_attr,
        residual_dropout=residual_dropout,
        description=description,
    )


def apply_rope(config: PatchConfig) -> None:
    """Module-level ``apply_rotary_pos_emb`` behind the rope slot."""
    config.apply_snippet("apply_rotary_pos_emb", "apply_rotary_pos_emb", description="rope slot guard")


def apply_sequence_classification(config: PatchConfig, *, head: str) -> None:
    """``<head>.forward`` (inherited from the generic head upstream) with its loss behind a slot."""
    config.apply_snippet(
        "sequence_classification_forward", f"{head}.forward", description="sequence_classification_loss slot"
    )


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
    apply_norms(config, prefix=prefix, rms_norm=rms_norm, extra_norms=extra_norms)
    apply_gated_mlp(
        config,
        mlp=f"{prefix}MLP",
        activation_attr=activation_attr,
        residual_dropout=mlp_residual_dropout,
        description="glu_activation slot guard",
    )
    apply_rope(config)
    config.apply_snippet(
        "causal_lm_forward",
        f"{causal_lm or prefix + 'ForCausalLM'}.forward",
        output_class=output_class,
        vocab_size=vocab_size,
        logit_softcapping=logit_softcapping,
        description="logits_to_keep slicing before the causal_lm_loss slot",
    )
    apply_sequence_classification(config, head=sequence_classification or f"{prefix}ForSequenceClassification")
    return config
