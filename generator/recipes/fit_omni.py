"""The fit of an Omni model (categories ``omni`` and ``omni_moe``): the omni / omni_moe recipe's arguments.

A Qwen-Omni-like model (docs/scaffolding.md, "Omni scaffolds") is scaffolded as the zoo's Omni models are
configured, from what :mod:`modelgraft.generator.upstream.read_omni` reads of upstream's class tree:

- the thinker's text decoder gets the dense (or MoE) fit's guards, less the classes only the speech side uses;
- ``model``: the thinker model the thinker holds as ``self.model`` (its towers, text decoder and the scatter of the
  towers' features), which gets the sequence-parallel forward, the position-id function and the collator step;
- ``vision`` / ``audio``: the towers the thinker model builds, which get ``dummy_forward`` (the audio clip sized by the
  tower's first convolution), the vision tower's rotary function behind ``rope_vision``;
- ``speech``: the top-level attributes of the speech side, whose checkpoint keys the state-dict hook drops
  (``talker.*``, ``token2wav.*`` or ``code2wav.*``); ``speech_classes``: the classes only they use, excluded;
- ``refused``: the top-level members that only serve audio output;
- ``init_weights``: the base class's ``_init_weights`` less its branches naming a speech class, rendered as an
  override (a kept method naming an excluded class would stop generation).

For ``omni_moe`` the text fit is the MoE one (experts, router, aux loss), and three pieces of a MoE thinker are read
too (Qwen3-Omni-MoE's): ``pretrained_models``, the kept ``PreTrainedModel`` classes other than the base class (the
thinker text model's own base), which get the base class's conversions, strict loading and attention;
``experts_activation_init``, experts whose activation only ``__init__`` names, recorded there and read as
``self.experts.activation_name``; and the router logits a thinker's output leaves out, which the generated
output keeps (``causal_lm.router_logits``; transformers 5.25's Qwen3-Omni-MoE thinker keeps them itself).

A model that is not Qwen-Omni-like (an audio tower without a talker, no thinker), or whose inputs the tests
cannot build without torchvision, is refused with the reason, before anything is written.
"""

from __future__ import annotations

from typing import Any

from modelgraft.generator.recipes.fit_vlm import image_processor_answers
from modelgraft.generator.upstream.structure import ModelStructure

__all__ = ["omni_arguments", "omni_processors"]


def omni_arguments(
    structure: ModelStructure, text: dict[str, Any], refusals: list[tuple[str, str]], *, moe: bool = False
) -> dict[str, Any]:
    """The omni / omni_moe recipe's arguments: the text fit's ``text`` less what only the speech side uses, and
    the thinker's parts read from upstream (docs/scaffolding.md, "Omni scaffolds"); refusals appended as
    (where, reason).

    The text rotary function is the one the thinker's text attention calls: a sectioned one
    (``apply_multimodal_rotary_pos_emb``, it takes ``mrope_section``) goes behind the rope slot as ``mrope``, a
    plain rotate-half one (Qwen3-Omni interleaves the sections in its rotary embedding) as ``rope``.
    """
    omni = structure.omni
    assert omni is not None
    where = omni.top_level or structure.model
    if omni.differences:
        refusals += [(where, f"not Qwen-Omni-like: {difference}") for difference in omni.differences]
        return {}
    if omni.thinker_model is None:
        refusals.append(
            (omni.thinker or where, "the thinker builds no self.model of this module's classes (its thinker model)")
        )
    else:
        for attr, found in (("audio_tower", omni.audio), ("visual", omni.vision), ("language_model", omni.text_model)):
            if found is None:
                refusals.append(
                    (omni.thinker_model, f"the thinker model builds no self.{attr} of this module's classes")
                )
    if omni.top_level_config is None:
        refusals.append((where, "the top-level class names no config class (config: <Config> or config_class)"))
    conv = omni.audio_conv
    if omni.audio is not None and conv is None:
        refusals.append((omni.audio, "no Conv1d or Conv2d in __init__ that dummy_forward can size a blank clip by"))
    if moe and not (text.get("experts") and text.get("router")):
        missing = " and ".join(part for part in ("experts", "router") if not text.get(part))
        refusals.append(
            (omni.thinker or where, f"the omni_moe recipe guards the thinker's experts and router: no {missing} fits")
        )
    if refusals:
        return {}
    assert conv is not None
    speech = set(omni.speech_classes)
    arguments = {
        key: value for key, value in text.items() if key not in ("sequence_classification", "base_model", "rope")
    }
    for key in ("norms", "mlps", "call_sites"):
        arguments[key] = [part for part in text.get(key) or [] if part["cls"] not in speech]
    sites = {site["cls"] for site in arguments["call_sites"]}
    if omni.audio_layer_norms and omni.audio not in sites:
        # the audio tower's own final LayerNorm (ln_post), guarded as the zoo's Omni configs guard it
        arguments["call_sites"].append(
            {
                "cls": omni.audio,
                "layer_norms": list(omni.audio_layer_norms),
                "activation": "",
                "activation_config": "",
                "activation_name": "",
            }
        )
    rope = structure.rope
    plain = rope is not None and rope.name == omni.text_rope and rope.formulation == "rotate_half"
    arguments["rope"] = omni.text_rope if plain and not omni.text_rope_sectioned else None
    attr, kind = conv
    arguments.update(
        {
            "vision": {"cls": omni.vision, "rope": omni.vision_rope or ""},
            "audio": {
                "cls": omni.audio,
                "input_weight": f"self.{attr}.weight",
                # A one-channel Conv2d (Qwen3-Omni) takes the mel bins as its height: the tower's own count.
                "mel_bins": "weight.shape[1]" if kind == "Conv1d" else "self.num_mel_bins",
            },
            "mrope": omni.text_rope if omni.text_rope_sectioned else None,
            "model": omni.thinker_model,
            "text_model": omni.text_model,
            "top_level": omni.top_level,
            "top_level_config": omni.top_level_config or "",
            "speech": list(omni.speech),
            "speech_classes": list(omni.speech_classes),
            "refused": dict(omni.refused),
        }
    )
    if moe:
        arguments.update(_moe_thinker(structure, arguments))
    init = omni.init_weights
    if init is not None:
        arguments["init_weights"] = {
            "owner": init.owner,
            "params": list(init.params),
            "body": init.body,
            "dropped": list(init.dropped),
            "imports": list(init.imports),
        }
    return arguments


def _moe_thinker(structure: ModelStructure, arguments: dict[str, Any]) -> dict[str, Any]:
    """The MoE thinker's own pieces (see the module docstring), as recipe arguments."""
    omni = structure.omni
    assert omni is not None
    found: dict[str, Any] = {
        "pretrained_models": [cls for cls in omni.pretrained_bases if cls != f"{structure.prefix}PreTrainedModel"]
    }
    if omni.experts_activation_init is not None:
        cls, attr = omni.experts_activation_init
        found["experts"] = {**arguments["experts"], "activation": "self.experts.activation_name"}
        found["experts_activation_init"] = {"cls": cls, "config_attr": attr}
    if omni.router_logits is not None:
        found["causal_lm"] = {**arguments["causal_lm"], "router_logits": list(omni.router_logits)}
    return found


def omni_processors(structure: ModelStructure, refusals: list[tuple[str, str]]) -> dict[str, str]:
    """The processor class and the image processor class the scaffold's Omni tests build: the PIL image processor
    where upstream has one, else the torchvision one on modelgraft's torch stand-in (as for a VLM,
    :func:`modelgraft.generator.recipes.fit_vlm.vlm_processors`)."""
    omni = structure.omni
    assert omni is not None
    processor = next((p.cls for p in omni.processors if p.kind == "processor"), None)
    pil = next((p.cls for p in omni.processors if p.kind == "image_processor_pil"), None)
    image = pil or next((p.cls for p in omni.processors if p.kind == "image_processor"), None)
    where = omni.top_level or structure.model
    if processor is None:
        refusals.append((where, "no processor class: neither the package nor the Auto tables name one"))
    if image is None:
        refusals.append((where, "no image processor class: neither the package nor the Auto tables name one"))
    if processor is None or image is None:
        return {}
    return image_processor_answers(processor, image, torchvision_only=pil is None)
