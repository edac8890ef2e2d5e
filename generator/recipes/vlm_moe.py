"""The VLM + MoE recipe (Qwen3-VL-MoE): the VLM recipe on both towers, plus the MoE pieces on the text decoder.

A VLM whose text decoder routes its MLPs over experts needs everything :func:`modelgraft.generator.recipes.vlm`
applies (towers built from this module's classes, RoPE and vision RoPE guards, the fused-loss head reading
``text_config``'s vocabulary, ``dummy_forward``, the position-id function) and the MoE pieces of
:func:`modelgraft.generator.recipes.moe_text`, read from the same snippets:

- ``moe_experts_guard`` on the sparse block's call of its experts (the guard sits at the call, not in the
  experts' forward, which upstream's ``@use_experts_implementation`` dispatches around; docs/design.md, "Op
  slots");
- ``<kind>_router_guard`` on the router's forward, which keeps returning the router logits first, so upstream's
  ``_can_record_outputs`` records them into the output's ``router_logits``;
- the head's aux-loss call behind ``load_balancing_loss_slot`` (the VLM recipe's ``aux_loss``), whose arguments
  are upstream's own (``self.config.text_config.num_experts`` ...);
- ``moe_parallel_plan`` on the head: the fused expert tensors of the text stack
  (``model.language_model.layers``) sharded by expert.

The output dataclasses (``router_logits``, ``aux_loss``) are upstream's, untouched: no body is reused from a
sibling through ``name_map``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from modelgraft.generator.dsl.config import PatchConfig
from modelgraft.generator.recipes.dense import _named
from modelgraft.generator.recipes.moe import apply_router
from modelgraft.generator.recipes.parts import CallSites, Experts, LossHead, Mlp, Norm, Rope, Router
from modelgraft.generator.recipes.vlm import VisionTower, vlm

__all__ = ["apply_moe_decoder", "vlm_moe"]


def vlm_moe(
    config: PatchConfig,
    *,
    prefix: str,
    vision: VisionTower,
    experts: Experts,
    router: Router,
    norms: Sequence[Norm] = (Norm(),),
    mlps: Sequence[Mlp] = (Mlp(),),
    call_sites: Sequence[CallSites] = (),
    rope: str | Rope | None = None,
    mrope: str | None = None,
    causal_lm: LossHead = LossHead("{prefix}ForConditionalGeneration"),
    towers: Mapping[str, str] | None = None,
    aux_loss: str = "load_balancing_loss_func",
    layers: str = "model.language_model.layers",
    sparse_block_attr: str = "mlp",
    text_model: str | None = "{prefix}TextModel",
    videos: bool = True,
    placeholder_ids: Sequence[str] = (),
    indexer: str | None = None,
) -> PatchConfig:
    """Apply the VLM snippets and the MoE snippets to ``config`` for the model whose classes start with ``prefix``.

    The arguments shared with :func:`~modelgraft.generator.recipes.vlm.vlm` mean what they mean there; ``experts``,
    ``router`` and ``aux_loss`` what they mean for :func:`~modelgraft.generator.recipes.moe.moe_text`. ``layers``
    is the ``state_dict`` prefix of the text decoder's layers (inside the conditional-generation class) and
    ``sparse_block_attr`` the layer attribute holding the sparse block, for the parallel plan; ``indexer`` a
    DeepSeek sparse attention indexer class of the text decoder, as for :func:`~modelgraft.generator.recipes.moe.moe_text`.
    """
    vlm(
        config,
        prefix=prefix,
        vision=vision,
        norms=norms,
        mlps=mlps,
        call_sites=call_sites,
        rope=rope,
        mrope=mrope,
        causal_lm=causal_lm,
        towers=towers,
        aux_loss=aux_loss,
        text_model=text_model,
        videos=videos,
        placeholder_ids=placeholder_ids,
    )
    apply_moe_decoder(
        config,
        experts=experts,
        router=router,
        causal_lm=_named(causal_lm.cls, prefix),
        prefix=prefix,
        layers=layers,
        sparse_block_attr=sparse_block_attr,
        indexer=indexer,
    )
    return config


def apply_moe_decoder(
    config: PatchConfig,
    *,
    experts: Experts,
    router: Router | None,
    causal_lm: str,
    prefix: str,
    layers: str,
    sparse_block_attr: str,
    indexer: str | None = None,
) -> None:
    """The MoE pieces of a multimodal model's text decoder: experts and router behind their slots, and the
    expert-parallel plan on ``causal_lm`` (a class name) over the fused expert tensors under ``layers``.

    The aux-loss call is the head's (its ``aux_loss`` argument); shared by the VLM + MoE and Omni + MoE recipes.
    """
    config.apply_snippet(
        "moe_experts_guard",
        f"{_named(experts.sparse_block, prefix)}.forward",
        activation=experts.activation,
        layout=experts.layout,
        interleaved=experts.interleaved,
        gate_up_bias=experts.gate_up_bias,
        down_bias=experts.down_bias,
        limit=experts.limit,
        alpha=experts.alpha,
        activation_first=experts.activation_first,
        description="routed experts behind the moe_experts slot",
    )
    if router is not None:  # None: the router stays upstream's (a composed VLM's own text model without one read)
        apply_router(config, router, prefix=prefix)
    if indexer is not None:
        config.apply_snippet(
            "dsa_indexer_guard",
            f"{_named(indexer, prefix)}.forward",
            description="DSA indexer's scores, mask and top-k behind the dsa_indexer slot",
        )
    config.apply_snippet(
        "moe_parallel_plan",
        f"{causal_lm}.get_parallel_plan",
        add=True,
        prefix=prefix,
        layers=layers,
        block=sparse_block_attr,
        biases=[bias for bias in (experts.gate_up_bias, experts.down_bias) if bias],
        description="expert-parallel plan of the fused expert tensors",
    )
