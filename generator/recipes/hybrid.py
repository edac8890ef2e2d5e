"""The hybrid linear-attention recipe (Qwen3.5): the VLM recipe, plus the Gated DeltaNet mixer's operations behind
their op slots and the text-only causal LM's loss head.

Qwen3.5's decoder interleaves full-attention layers with Gated DeltaNet layers. The mixer's module stays
upstream's code; what a kernel replaces is behind a slot:

- ``rms_norm_gated_guard`` on the gated output norm (``<Prefix>RMSNormGated.forward``);
- ``causal_conv1d_guard`` on the module-level ``causal_conv1d_fn`` and ``causal_conv1d_update`` (transformers
  5.25's mixers reach them through the module-level ``causal_conv1d_forward``, which stays upstream's: it reads
  the cache's conv state, then calls one of the two, handing ``causal_conv1d_fn`` the mixer's ``**kwargs``);
- ``gated_delta_rule_guard`` on ``torch_chunk_gated_delta_rule`` and ``torch_recurrent_gated_delta_rule``.

Upstream decorates those four functions with ``use_kernel_func_from_hub_with_fallback``, which swaps in FLA or
causal-conv1d at import time whenever they are installed. The guards drop that decorator: the generated
functions are upstream's torch bodies, and those packages run only when bound as the ``fla`` and
``causal_conv1d`` kernel families (models/ops/kernels/__init__.py). Each gets ``use_kernel_forward_from_hub``
under upstream's name instead, which the mixer class's ``use_kernelized_func`` requires, and which changes
nothing unless the user calls ``kernelize``. The rest is :func:`vlm`'s (the 1+weight
RMSNorm behind ``rms_norm`` with its offset, the gated MLP, the partial rotate-half RoPE, the vision tower, the
towers rewrite), and ``<Prefix>ForCausalLM`` (the text-only model upstream also ships) gets the same loss head
as the conditional-generation class.

:func:`gated_delta_net_text` and :func:`gated_delta_net_moe_text` are the scaffold's recipes for text-only Gated
DeltaNet hybrids (olmo_hybrid, qwen3_next): the same mixer guards, then :func:`dense_text` or :func:`moe_text`.
:func:`short_convolution_text` and :func:`short_convolution_moe_text` are those for short-convolution hybrids
(lfm2, lfm2_moe), whose mixer gates a depthwise causal conv and runs no delta rule: the two conv guards alone.

:func:`hybrid_moe` is the same over :func:`modelgraft.generator.recipes.vlm_moe.vlm_moe` (Qwen3.5-MoE): the MoE
pieces on the text decoder, and the text-only head's aux-loss call behind its slot too. Its mixer is a structural
duplicate of Qwen3.5's (the gated norm class, the four functions, byte for byte but the prefix), so it reuses
Qwen3.5's mixer patches through ``name_map`` (:func:`reuse_gated_delta_net`); everything whose output dataclass
differs (the MoE fields: router logits, the aux loss) stays per model, through snippets, and the dataclass check
(docs/dsl.md, check 5) rejects a reused body that would build the MoE dataclass without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelgraft.generator.codegen.tokens import rename_identifiers
from modelgraft.generator.dsl.config import PatchConfig
from modelgraft.generator.errors import PatchApiError
from modelgraft.generator.recipes.dense import _named, apply_causal_lm, dense_text
from modelgraft.generator.recipes.moe import moe_text
from modelgraft.generator.recipes.parts import LossHead
from modelgraft.generator.recipes.vlm import vlm
from modelgraft.generator.recipes.vlm_moe import vlm_moe

__all__ = [
    "HUB_FALLBACK_DECORATOR",
    "GatedDeltaNet",
    "ShortConvolution",
    "apply_causal_conv1d",
    "apply_gated_delta_net",
    "gated_delta_net_moe_text",
    "gated_delta_net_text",
    "hybrid",
    "hybrid_moe",
    "reuse_gated_delta_net",
    "short_convolution_moe_text",
    "short_convolution_text",
]

#: Upstream's decorator that binds an installed FLA / causal-conv1d at import time; dropped from every guarded
#: function so that only a bound kernel family changes what the model computes.
HUB_FALLBACK_DECORATOR = "use_kernel_func_from_hub_with_fallback"


@dataclass(frozen=True)
class GatedDeltaNet:
    """Where a Gated DeltaNet mixer's operations live: its gated norm class and the four module-level functions.

    ``norm=""`` leaves the gated norm upstream's (a forward the rms_norm_gated slot does not recompute).
    """

    norm: str = "{prefix}RMSNormGated"
    norm_eps: str = "variance_epsilon"
    norm_activation: str = "self.activation"
    conv: str = "causal_conv1d_fn"
    conv_update: str = "causal_conv1d_update"
    chunk: str = "torch_chunk_gated_delta_rule"
    recurrent: str = "torch_recurrent_gated_delta_rule"


@dataclass(frozen=True)
class ShortConvolution:
    """Where a short-convolution mixer's convs live (lfm2's ``Lfm2ShortConv``): the two module-level functions it
    reaches, the whole-sequence conv and the decode step."""

    conv: str = "causal_conv1d_fn"
    conv_update: str = "causal_conv1d_update"


def apply_causal_conv1d(config: PatchConfig, conv: str, conv_update: str) -> None:
    """The module-level whole-sequence conv and decode step behind the causal_conv1d(_update) slots, each the torch
    body without upstream's hub decorator."""
    for function, update in ((conv, False), (conv_update, True)):
        config.apply_snippet(
            "causal_conv1d_guard",
            function,
            update=update,
            keep_decorators=(HUB_FALLBACK_DECORATOR,),
            description=f"{'causal_conv1d_update' if update else 'causal_conv1d'} slot guard; the torch body, "
            "without the hub decorator",
        )


def apply_gated_delta_net(config: PatchConfig, mixer: GatedDeltaNet, *, prefix: str) -> None:
    """The mixer's gated norm, causal conv1d (whole and decode step) and gated delta rule behind their slots."""
    if mixer.norm:
        config.apply_snippet(
            "rms_norm_gated_guard",
            f"{_named(mixer.norm, prefix)}.forward",
            eps=mixer.norm_eps,
            activation=mixer.norm_activation,
            description="rms_norm_gated slot guard",
        )
    apply_causal_conv1d(config, mixer.conv, mixer.conv_update)
    undecorated = (HUB_FALLBACK_DECORATOR,)
    for function, slot in ((mixer.chunk, "chunk_gated_delta_rule"), (mixer.recurrent, "recurrent_gated_delta_rule")):
        config.apply_snippet(
            "gated_delta_rule_guard",
            function,
            slot=slot,
            keep_decorators=undecorated,
            description=f"{slot} slot guard; the torch body, without the hub decorator",
        )


def gated_delta_net_targets(mixer: GatedDeltaNet, *, prefix: str) -> tuple[str, ...]:
    """The members :func:`apply_gated_delta_net` patches: the gated norm's forward (when guarded), then the functions."""
    norm = (f"{_named(mixer.norm, prefix)}.forward",) if mixer.norm else ()
    return (*norm, mixer.conv, mixer.conv_update, mixer.chunk, mixer.recurrent)


def reuse_gated_delta_net(
    config: PatchConfig, sibling: PatchConfig, *, prefix: str, name_map: Mapping[str, str], mixer: GatedDeltaNet
) -> None:
    """Apply the mixer patches of ``sibling`` (a config that called :func:`apply_gated_delta_net`) to ``config``.

    For a model whose mixer is a structural duplicate of the sibling's: each body is reused as it is, its targets
    and identifiers renamed by ``name_map`` (``{"Qwen3_5": "Qwen3_5Moe"}``), so the two models' mixer patches
    cannot drift apart. ``prefix`` is this model's; the sibling's is the key ``name_map`` maps to it.
    """
    sibling_prefix = next((old for old, new in name_map.items() if new == prefix), None)
    if sibling_prefix is None:
        raise PatchApiError(f"name_map {dict(name_map)!r} maps no sibling prefix to {prefix!r}", target=prefix)
    patches = {patch.target: patch for patch in sibling.patches}
    for target in gated_delta_net_targets(mixer, prefix=sibling_prefix):
        patch = patches.get(target)
        if patch is None:
            raise PatchApiError(f"{sibling.source_module} has no mixer patch of {target} to reuse", target=target)
        register = config.override_method if "." in target else config.replace_function
        register(
            rename_identifiers(target, name_map),
            replacement=patch.body,
            name_map=dict(name_map),
            description=patch.description,
            keep_decorators=patch.keep_decorators,
        )


def hybrid(
    config: PatchConfig,
    *,
    prefix: str,
    mixer: GatedDeltaNet = GatedDeltaNet(),
    text_causal_lm: LossHead | None = LossHead("{prefix}ForCausalLM"),
    **vlm_options: Any,
) -> PatchConfig:
    """Apply the Gated DeltaNet guards, then :func:`vlm` with ``vlm_options``, then the text-only loss head."""
    apply_gated_delta_net(config, mixer, prefix=prefix)
    vlm(config, prefix=prefix, **vlm_options)
    if text_causal_lm is not None:
        apply_causal_lm(config, text_causal_lm, prefix=prefix)
    return config


def hybrid_moe(
    config: PatchConfig,
    *,
    prefix: str,
    mixer: GatedDeltaNet = GatedDeltaNet(),
    text_causal_lm: LossHead | None = LossHead("{prefix}ForCausalLM"),
    aux_loss: str = "load_balancing_loss_func",
    mixer_from: PatchConfig | None = None,
    name_map: Mapping[str, str] | None = None,
    **vlm_moe_options: Any,
) -> PatchConfig:
    """Apply the Gated DeltaNet guards, then :func:`vlm_moe`, then the text-only loss head with its aux loss.

    With ``mixer_from`` (Qwen3.5's config) the mixer's patches are that config's, reused through ``name_map``
    (:func:`reuse_gated_delta_net`); else they are rendered for this model.
    """
    if mixer_from is not None:
        reuse_gated_delta_net(config, mixer_from, prefix=prefix, name_map=name_map or {}, mixer=mixer)
    else:
        apply_gated_delta_net(config, mixer, prefix=prefix)
    vlm_moe(config, prefix=prefix, aux_loss=aux_loss, **vlm_moe_options)
    if text_causal_lm is not None:
        apply_causal_lm(config, text_causal_lm, prefix=prefix, aux_loss=aux_loss)
    return config


def gated_delta_net_text(
    config: PatchConfig, *, prefix: str, gated_delta_net: GatedDeltaNet, **dense_options: Any
) -> PatchConfig:
    """A text-only Gated DeltaNet hybrid (olmo_hybrid): the mixer's guards, then :func:`dense_text`."""
    apply_gated_delta_net(config, gated_delta_net, prefix=prefix)
    return dense_text(config, prefix=prefix, **dense_options)


def gated_delta_net_moe_text(
    config: PatchConfig, *, prefix: str, gated_delta_net: GatedDeltaNet, **moe_options: Any
) -> PatchConfig:
    """A text-only Gated DeltaNet hybrid with routed experts (qwen3_next): the mixer's guards, then
    :func:`moe_text`."""
    apply_gated_delta_net(config, gated_delta_net, prefix=prefix)
    return moe_text(config, prefix=prefix, **moe_options)


def short_convolution_text(
    config: PatchConfig, *, prefix: str, short_convolution: ShortConvolution, **dense_options: Any
) -> PatchConfig:
    """A text-only short-convolution hybrid (lfm2, lfm3): the mixer's two convs behind their slots, then
    :func:`dense_text`."""
    apply_causal_conv1d(config, short_convolution.conv, short_convolution.conv_update)
    return dense_text(config, prefix=prefix, **dense_options)


def short_convolution_moe_text(
    config: PatchConfig, *, prefix: str, short_convolution: ShortConvolution, **moe_options: Any
) -> PatchConfig:
    """A text-only short-convolution hybrid with routed experts (lfm2_moe): the mixer's two convs behind their
    slots, then :func:`moe_text`."""
    apply_causal_conv1d(config, short_convolution.conv, short_convolution.conv_update)
    return moe_text(config, prefix=prefix, **moe_options)
