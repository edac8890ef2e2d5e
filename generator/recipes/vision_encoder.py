"""The vision-encoder recipe (SigLIP, CLIP, Pixtral): slot guards for a ViT tower that a composed VLM builds on its own.

LLaVA-style VLMs (LLaVA, LLaVA-NeXT, LLaVA-OneVision, PaliGemma, Gemma 3, Aya Vision...) build their vision tower
with ``AutoModel.from_config(config.vision_config)``, whose ``model_type`` is an encoder's (``siglip_vision_model``,
``clip_vision_model``, ``pixtral``). A generated encoder registered under that ``model_type`` is what such a VLM's
tower runs instead of upstream's class, so the kernels bound for training reach the tower too. An encoder has no
causal LM; ViTs such as SigLIP and CLIP have no RoPE and no gated MLP either, while Pixtral has RMSNorms, a gated
MLP and a RoPE function: what an encoder's structure allows to guard is what this recipe applies.

- ``call_sites_guard`` for ``call_sites``: each ``nn.LayerNorm`` call of the encoder layers, the pre- and
  post-encoder norms and a pooling head behind the ``layer_norm`` slot (the module's own shape, weight, bias and
  eps handed to the kernel);
- ``mlp_activation_guard`` for ``mlps`` (plain ``fc2(act(fc1(x)))`` MLPs): the activation module's one call behind
  the ``activation`` slot, named by ``Mlp.activation`` (``self.config.hidden_act``);
- ``rms_norm_guard`` for ``norms``: an encoder with RMSNorm classes (none of SigLIP's or CLIP's; Pixtral's);
- ``glu_mlp_guard`` for gated ``mlps`` (``Mlp(kind="gated")``): the activation of a gated MLP behind the
  ``glu_activation`` slot (Pixtral's);
- ``rope_guard`` for ``rope``: an encoder whose module-level RoPE function has one of the formulations the rope
  slot computes (Pixtral's ``apply_rotary_pos_emb``, llama's rotate-half applied to 2-D positions); None, the
  default, for an encoder without one;
- the base class's checkpoint conversions, strict loading and attention on request, as for a dense model
  (:func:`modelgraft.generator.recipes.dense.apply_pretrained_model`), and the upstream version check.

What the recipe leaves as upstream's code on purpose: the attention, which already dispatches through the registered
attention implementations (eager, sdpa, flash, ``fused_attention`` on request); the patch and position embeddings;
a pooling head's ``nn.MultiheadAttention`` (torch's own module, with no slot that recomputes it); and every output
dataclass. Each guard keeps upstream's statements as the eager path, so with no slot bound the encoder's outputs
are upstream's, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

from modelgraft.generator.dsl.config import PatchConfig
from modelgraft.generator.recipes.dense import (
    apply_call_sites,
    apply_mlps,
    apply_norms,
    apply_pretrained_model,
    apply_rope,
    apply_upstream_version_check,
)
from modelgraft.generator.recipes.parts import CallSites, Mlp, Norm, Rope

__all__ = ["vision_encoder"]


def vision_encoder(
    config: PatchConfig,
    *,
    prefix: str,
    norms: Sequence[Norm] = (),
    mlps: Sequence[Mlp] = (),
    call_sites: Sequence[CallSites] = (),
    rope: str | Rope | None = None,
    pretrained_model: str | None = "{prefix}PreTrainedModel",
) -> PatchConfig:
    """Apply the vision-encoder snippets to ``config`` for the encoder whose classes start with ``prefix``.

    Nothing is guarded by default: a config lists what its encoder has, as the upstream reader reports it
    (``patchgen-inspect <m>``): ``mlps`` its plain MLPs (``Mlp(kind="plain", act=..., activation=...)``) or gated
    ones (``Mlp(kind="gated", gate=..., up=..., down=..., activation=...)``), ``call_sites`` each class whose
    forward calls ``nn.LayerNorm`` modules, ``norms`` any RMSNorm class, ``rope`` its module-level RoPE function
    (a name, or ``Rope(function, formulation)`` with the formulation the reader reports).
    ``pretrained_model`` is the base class of every model class (:func:`apply_pretrained_model`; None: none).
    The output refuses to import under another upstream version (:func:`apply_upstream_version_check`).
    """
    apply_upstream_version_check(config)
    apply_norms(config, norms, prefix=prefix)
    apply_mlps(config, mlps, prefix=prefix, description="glu_activation slot guard")
    apply_call_sites(config, call_sites, prefix=prefix)
    apply_rope(config, rope)
    apply_pretrained_model(config, pretrained_model, prefix=prefix)
    return config
