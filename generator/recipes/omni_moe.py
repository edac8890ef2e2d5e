"""The Omni + MoE recipe (Qwen3-Omni-MoE): the Omni recipe on the thinker, plus the MoE pieces on its text decoder.

An Omni thinker whose text decoder routes its MLPs over experts needs everything
:func:`modelgraft.generator.recipes.omni.omni` applies (the speech side excluded, the thinker-only top-level class,
the text, vision and audio guards, both ``dummy_forward`` methods, the position-id function and the collator
step) and the MoE pieces the VLM + MoE recipe applies to its text decoder
(:func:`modelgraft.generator.recipes.vlm_moe.apply_moe_decoder`):

- ``moe_experts_guard`` on the sparse block's call of its fused experts;
- ``<kind>_router_guard`` on the router, which keeps returning the router logits first (upstream's
  ``_can_record_outputs`` records them into the output's ``router_logits``);
- the thinker's aux-loss call behind ``load_balancing_loss_slot`` (the Omni recipe's ``aux_loss``);
- ``moe_parallel_plan`` on the thinker: the fused expert tensors of its text stack (``model.language_model.layers``,
  the text decoder inside the thinker model) sharded by expert.

The output dataclass (``aux_loss`` and ``router_logits``) is upstream's, untouched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from modelgraft.generator.dsl.config import PatchConfig
from modelgraft.generator.recipes.dense import _named
from modelgraft.generator.recipes.omni import AudioTower, omni
from modelgraft.generator.recipes.parts import CallSites, Experts, LossHead, Mlp, Norm, Rope, Router
from modelgraft.generator.recipes.vlm import VisionTower
from modelgraft.generator.recipes.vlm_moe import apply_moe_decoder

__all__ = ["omni_moe"]


def omni_moe(
    config: PatchConfig,
    *,
    prefix: str,
    vision: VisionTower,
    audio: AudioTower,
    speech_classes: Sequence[str],
    experts: Experts,
    router: Router,
    speech: Sequence[str],
    refused: Mapping[str, str],
    norms: Sequence[Norm] = (Norm(),),
    mlps: Sequence[Mlp] = (Mlp(),),
    call_sites: Sequence[CallSites] = (),
    rope: str | Rope | None = None,
    mrope: str | None = None,
    causal_lm: LossHead = LossHead("{prefix}ThinkerForConditionalGeneration"),
    model: str = "{prefix}ThinkerModel",
    text_model: str | None = "{prefix}ThinkerTextModel",
    top_level: str = "{prefix}ForConditionalGeneration",
    aux_loss: str = "load_balancing_loss_func",
    layers: str = "model.language_model.layers",
    sparse_block_attr: str = "mlp",
) -> PatchConfig:
    """Apply the Omni snippets and the MoE snippets to ``config`` for the model whose classes start with ``prefix``.

    The arguments shared with :func:`~modelgraft.generator.recipes.omni.omni` mean what they mean there;
    ``experts``, ``router`` and ``aux_loss`` what they mean for :func:`~modelgraft.generator.recipes.moe.moe_text`.
    ``layers`` is the ``state_dict`` prefix of the text decoder's layers inside the thinker and
    ``sparse_block_attr`` the layer attribute holding the sparse block, for the parallel plan.
    """
    omni(
        config,
        prefix=prefix,
        vision=vision,
        audio=audio,
        speech_classes=speech_classes,
        norms=norms,
        mlps=mlps,
        call_sites=call_sites,
        rope=rope,
        mrope=mrope,
        causal_lm=causal_lm,
        model=model,
        text_model=text_model,
        top_level=top_level,
        aux_loss=aux_loss,
        speech=speech,
        refused=refused,
    )
    apply_moe_decoder(
        config,
        experts=experts,
        router=router,
        causal_lm=_named(causal_lm.cls, prefix),
        prefix=prefix,
        layers=layers,
        sparse_block_attr=sparse_block_attr,
    )
    return config
